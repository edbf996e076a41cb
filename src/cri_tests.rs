use super::*;

#[test]
fn cri_states_times_and_reasons_read_as_the_cri_means_them() {
    assert_eq!(status_of(0), ManagedStatus::Created);
    assert_eq!(status_of(1), ManagedStatus::Running);
    assert_eq!(status_of(2), ManagedStatus::Exited);
    assert_eq!(status_of(3), ManagedStatus::Unknown);
    assert_eq!(status_of(99), ManagedStatus::Unknown);
    // 0 is "not yet"; a negative time is garbage, not 1969.
    assert_eq!(nanos(0), None);
    assert_eq!(nanos(-5), None);
    assert_eq!(
        nanos(1_500_000_000_123_456_789),
        Some(UNIX_EPOCH + Duration::new(1_500_000_000, 123_456_789))
    );
    assert_eq!(clip("OOMKilled".into()), "OOMKilled");
    let long = clip("é".repeat(1000));
    assert!(long.len() <= 256 && long.starts_with('é'));
}
