//! The threads `/ui` reads run on: as many as reads may run at once, each at the
//! lowest CPU and I/O priority (`SCHED_IDLE`, nice 19, the idle I/O class). On a
//! node whose cores are busy, a read then takes what ingest leaves, never the reverse: measured with `eventgate bench ui`
//! (docs/benchmarks.md), four readers on tokio's blocking threads took the defaults'
//! ingest to 0.42x on 2 cores. The blocking pool is not used because its threads also
//! run the spool's and the forwarders' blocking work, which must keep its priority.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

/// The nice value of the read threads: the lowest priority.
const NICE: libc::c_int = 19;
/// `IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT`: disk time only when no one else wants it.
const IOPRIO_IDLE: libc::c_long = 3 << 13;
/// `IOPRIO_WHO_PROCESS`: with a thread id, that thread.
const IOPRIO_WHO_PROCESS: libc::c_long = 1;

pub(crate) struct ReadThreads {
    jobs: Sender<Job>,
}

impl ReadThreads {
    /// Starts `count` threads; `None` when not one could be started.
    pub(crate) fn start(count: usize) -> Option<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let mut started = 0;
        for n in 0..count {
            let queue = Arc::clone(&queue);
            let spawned = std::thread::Builder::new()
                .name(format!("eventgate-ui-read-{n}"))
                .spawn(move || run(&queue));
            match spawned {
                Ok(_) => started += 1,
                Err(error) => tracing::warn!(%error, "/ui: could not start a read thread"),
            }
        }
        (started > 0).then_some(Self { jobs })
    }

    /// Runs `work` on one of the threads; the receiver gets its answer, or is closed
    /// if it panicked.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> oneshot::Receiver<T> {
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move || {
            if let Ok(value) = catch_unwind(AssertUnwindSafe(work)) {
                let _ = answer.send(value);
            }
        });
        // Fails only once every thread is gone; the receiver then reads as closed.
        let _ = self.jobs.send(job);
        answered
    }
}

/// One thread's life: lower its priority, then run jobs until the sender is gone.
fn run(queue: &Mutex<Receiver<Job>>) {
    lower_priority();
    loop {
        let job = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

/// Lowers the calling thread's CPU (nice) and I/O (idle class) priority. Linux
/// applies both per thread. Failing is not fatal: the read just competes as before.
fn lower_priority() {
    // SAFETY: gettid has no preconditions; setpriority and ioprio_set act on the
    // calling thread only (its id), with constant arguments.
    let tid = unsafe { libc::gettid() };
    let nice = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, NICE) };
    // SCHED_IDLE: run only when no other thread wants the core (nice 19 still takes
    // a share from them).
    let idle = libc::sched_param { sched_priority: 0 };
    let policy = unsafe { libc::sched_setscheduler(tid, libc::SCHED_IDLE, &idle) };
    let io = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            libc::c_long::from(tid),
            IOPRIO_IDLE,
        )
    };
    if nice != 0 || policy != 0 || io != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "/ui: a read thread kept its priority"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The threads answer, survive a panicking job, and run at the lowest priority.
    #[tokio::test]
    async fn reads_run_at_the_lowest_priority_and_survive_a_panic() {
        let threads = ReadThreads::start(1).unwrap();
        let panicked = threads.run(|| -> u32 { panic!("a read that panics") });
        assert!(panicked.await.is_err());
        let (nice, policy) = threads
            .run(|| {
                // SAFETY: reads the calling thread's own priority and policy.
                let tid = unsafe { libc::gettid() };
                let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
                (nice, unsafe { libc::sched_getscheduler(0) })
            })
            .await
            .unwrap();
        assert_eq!((nice, policy), (NICE, libc::SCHED_IDLE));
    }
}
