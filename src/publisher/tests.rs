use super::subject::format_name;
use super::*;

/// DER of one element with a short length.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    assert!(content.len() < 0x80, "short form only in these tests");
    let mut out = vec![tag, content.len() as u8];
    out.extend_from_slice(content);
    out
}

fn attribute(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
    der(0x30, &[der(0x06, oid), der(tag, value)].concat())
}

const CN: &[u8] = &[0x55, 0x04, 0x03];
const O: &[u8] = &[0x55, 0x04, 0x0a];
const OU: &[u8] = &[0x55, 0x04, 0x0b];
const C: &[u8] = &[0x55, 0x04, 0x06];
const DC: &[u8] = &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19];
const EMAIL: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01];

#[test]
fn names_print_last_rdn_first_with_rfc4514_escapes() {
    let name = [
        der(0x31, &attribute(C, 0x13, b"DE")),
        der(0x31, &attribute(DC, 0x16, b"example")),
        der(0x31, &attribute(O, 0x0c, b"Acme, Inc.")),
        // A multi-valued RDN: both values joined with '+'.
        der(
            0x31,
            &[
                attribute(OU, 0x0c, b"ops+dev"),
                attribute(CN, 0x0c, b" #lead "),
            ]
            .concat(),
        ),
    ]
    .concat();
    assert_eq!(
        format_name(&name).as_deref(),
        Some(r"OU=ops\+dev+CN=\ #lead\ ,O=Acme\, Inc.,DC=example,C=DE")
    );
}

#[test]
fn other_types_and_values_are_hex_and_controls_are_escaped() {
    let bmp: Vec<u8> = "Zoë".encode_utf16().flat_map(u16::to_be_bytes).collect();
    let name = [
        der(0x31, &attribute(EMAIL, 0x16, b"a@b")),
        der(0x31, &attribute(CN, 0x1e, &bmp)),
        der(0x31, &attribute(O, 0x0c, b"a\nb;\"<>\\")),
        // A known type with a value that is no string: hex of its DER.
        der(0x31, &attribute(OU, 0x02, &[0x05])),
        der(0x31, &attribute(CN, 0x0c, "#é".as_bytes())),
    ]
    .concat();
    assert_eq!(
        format_name(&name).as_deref(),
        Some(
            "CN=\\#é,OU=#020105,O=a\\0Ab\\;\\\"\\<\\>\\\\,CN=Zoë,1.2.840.113549.1.9.1=#1603614062"
        )
    );
    assert_eq!(format_name(&[]).as_deref(), Some(""), "an empty subject");
}

#[test]
fn malformed_names_are_refused_not_guessed() {
    let good = der(0x31, &attribute(CN, 0x0c, b"x"));
    for bad in [
        good[..good.len() - 1].to_vec(),                  // cut short
        [good.clone(), vec![0x31]].concat(),              // a dangling tag
        der(0x30, &attribute(CN, 0x0c, b"x")),            // a SEQUENCE where a SET belongs
        der(0x31, &[]),                                   // an empty RDN
        vec![0x31, 0x80, 0x00, 0x00],                     // indefinite length
        vec![0x31, 0x85, 0, 0, 0, 0, 1],                  // a five-byte length
        der(0x31, &attribute(&[0x2a, 0x86], 0x0c, b"x")), // an OID cut mid-arc
    ] {
        assert_eq!(format_name(&bad), None, "{bad:02x?}");
    }
}

#[test]
fn a_generated_certificates_subject_is_read() {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CountryName, "DE");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "Acme, Inc.");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "node-7");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    assert_eq!(
        certificate_subject(cert.der()).as_deref(),
        Some(r"CN=node-7,O=Acme\, Inc.,C=DE")
    );
    assert_eq!(
        Publisher::of_certificate(cert.der()),
        Some(Publisher::Certificate {
            subject: r"CN=node-7,O=Acme\, Inc.,C=DE".into()
        })
    );
    assert_eq!(
        certificate_subject(&CertificateDer::from(vec![0x30, 0x00])),
        None
    );
}

#[test]
fn json_has_the_documented_shapes() {
    let process = Publisher::Process {
        uid: 0,
        gid: 4,
        pid: Some(123),
    };
    assert_eq!(process.to_json(), r#"{"gid":4,"pid":123,"uid":0}"#);
    let no_pid = Publisher::Process {
        uid: 1000,
        gid: 1000,
        pid: None,
    };
    assert_eq!(no_pid.to_json(), r#"{"gid":1000,"pid":null,"uid":1000}"#);
    let cert = Publisher::Certificate {
        subject: r#"CN=a\"b"#.into(),
    };
    let parsed: serde_json::Value = serde_json::from_str(&cert.to_json()).unwrap();
    assert_eq!(parsed, serde_json::json!({ "subject": r#"CN=a\"b"# }));
}

#[test]
fn columns_round_trip_and_mixed_columns_are_refused() {
    let cases = [
        None,
        Some(Publisher::Process {
            uid: u32::MAX,
            gid: 0,
            pid: Some(1),
        }),
        Some(Publisher::Process {
            uid: 5,
            gid: 6,
            pid: None,
        }),
        Some(Publisher::Certificate {
            subject: "CN=x".into(),
        }),
    ];
    for publisher in cases {
        let (uid, gid, pid, subject) = Publisher::columns(publisher.as_ref());
        let back = Publisher::from_columns(uid, gid, pid, subject.map(str::to_owned));
        assert_eq!(back, Ok(publisher));
    }
    for (uid, gid, pid, subject) in [
        (Some(1), None, None, None),
        (Some(1), Some(1), None, Some("CN=x")),
        (None, None, Some(7), None),
        (Some(-1), Some(0), None, None),
        (Some(0), Some(0), Some(1 << 40), None),
    ] {
        let error = Publisher::from_columns(uid, gid, pid, subject.map(str::to_owned));
        assert!(error.is_err(), "{uid:?} {gid:?} {pid:?} {subject:?}");
    }
}
