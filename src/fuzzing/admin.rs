//! The admin listener's HTTP requests, from anything that can reach it: a whole
//! gateway (`Gateway::start`, the default forwarders, `/ui` on, `POST /reload` behind
//! a token) serves on loopback, and each input is written to it as the raw bytes of
//! a request (request line, headers such as `Last-Event-ID` and `Authorization`,
//! body), as a client would send them.
//!
//! Properties: no request is answered 500 (bad input is a 4xx, and a healthy gateway
//! has no other excuse); no request without the token reloads the configuration;
//! and after each one, the listener still answers `/healthz` on a new connection.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};

use prost::Message as _;

use super::*;
use crate::config::Config;
use crate::gateway::Gateway;
use crate::proto::containerd::events::TaskExit;
use crate::proto::containerd::services::events::v1::PublishRequest;

/// How long one answer may take: `/ui` reads a store of a few events, and a live
/// page (`/ui/live`, an event stream) sends its head at once.
const ANSWER: Duration = Duration::from_secs(5);

struct Served {
    addr: SocketAddr,
}

/// One gateway for the whole fuzzing process, with a few events in its store.
fn served() -> &'static Served {
    static SERVED: OnceLock<Served> = OnceLock::new();
    SERVED.get_or_init(|| {
        // libFuzzer's own `main` runs the target, not Rust's, which would have set
        // SIGPIPE aside: a write to a connection the server already closed (an
        // answered 400, say) would otherwise end the process without a word.
        // SAFETY: setting a signal's disposition to SIG_IGN has no preconditions.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        let dir = tempfile::tempdir().expect("a temporary directory").keep();
        let token = dir.join("reload.token");
        // Not in any input the fuzzer starts from, and too long to be found.
        let secret: String = EventId::generate()
            .to_string()
            .chars()
            .chain(EventId::generate().to_string().chars())
            .filter(char::is_ascii_alphanumeric)
            .collect();
        std::fs::write(&token, &secret).expect("the token file");
        std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("the token file's mode");
        let socket = dir.join("eventgate.sock");
        let text = format!(
            "node = \"fuzz\"\ndata_dir = {data:?}\n[exchange]\nsocket = {socket:?}\n\
             [admin]\nlisten = \"127.0.0.1:0\"\nreload_token_file = {token:?}\n\
             [spool]\nsegment_bytes = \"1MiB\"\n",
            data = dir.display().to_string(),
            socket = socket.display().to_string(),
            token = token.display().to_string(),
        );
        let config = Config::parse(&text, "(fuzz)").expect("the fuzzing gateway's config");
        let (started, addr) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let gateway = Gateway::start(&config).await.expect("the fuzzing gateway");
                publish_some(&socket).await;
                let _ = started.send(gateway.admin_addr().expect("the admin listener"));
                std::future::pending::<()>().await;
            });
        });
        Served {
            addr: addr.recv().expect("the gateway started"),
        }
    })
}

/// Events for `/ui` to show and search, in two namespaces.
async fn publish_some(socket: &std::path::Path) {
    let mut client = crate::client::connect(&socket.display().to_string(), Duration::from_secs(5))
        .await
        .expect("a client");
    for n in 0..20u32 {
        let exit = TaskExit {
            container_id: format!("c{n}"),
            id: format!("c{n}"),
            pid: n,
            exit_status: n % 3,
            ..TaskExit::default()
        };
        let mut request = tonic::Request::new(PublishRequest {
            topic: "/tasks/exit".into(),
            event: Some(Any {
                type_url: "containerd.events.TaskExit".into(),
                value: exit.encode_to_vec(),
            }),
        });
        let namespace = if n % 2 == 0 { "default" } else { "k8s.io" };
        request.metadata_mut().insert(
            "containerd-namespace",
            namespace.parse().expect("a namespace"),
        );
        client.publish(request).await.expect("a publish");
    }
}

/// Writes `request` on a new connection and reads the answer's head (`whole`: all of
/// it, to the server's close); `None` when the server closed without one (a request
/// it could not parse may be answered 400 or just closed). `done`: the write side is
/// shut once the request is sent (how a fuzz input, complete or not, ends); else the
/// request says `Connection: close`.
fn exchange(addr: SocketAddr, request: &[u8], whole: bool, done: bool) -> Option<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect_timeout(&addr, ANSWER).expect("the admin listener accepts");
    stream
        .set_read_timeout(Some(ANSWER))
        .expect("a read timeout");
    stream
        .set_write_timeout(Some(ANSWER))
        .expect("a write timeout");
    // The server may answer and close before reading everything.
    let _ = stream.write_all(request);
    if done {
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buffer[..n]);
                // The head is enough, and a live page's stream never ends.
                if !whole && answer.windows(4).any(|w| w == b"\r\n\r\n") || answer.len() > 16 << 20
                {
                    break;
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => break,
            // libFuzzer's timer signal interrupts a blocking read.
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => panic!("no answer within {ANSWER:?}: {error}"),
        }
    }
    let head = answer.split(|&b| b == b'\n').next()?;
    let status = std::str::from_utf8(head)
        .ok()?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()?;
    Some((status, answer))
}

pub fn admin(data: &[u8]) {
    let served = served();
    if let Some((status, answer)) = exchange(served.addr, data, false, true) {
        assert!(
            status != 500,
            "answered 500 to {:?}:\n{}",
            String::from_utf8_lossy(data),
            String::from_utf8_lossy(&answer)
        );
        if matches!(status, 200 | 422) && String::from_utf8_lossy(data).contains("/reload") {
            let (_, metrics) = exchange(
                served.addr,
                b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                true,
                false,
            )
            .expect("metrics");
            assert!(
                !String::from_utf8_lossy(&metrics).contains("eventgate_config_reloads_total"),
                "reloaded without the token: {:?}",
                String::from_utf8_lossy(data)
            );
        }
    }
    // Still serving: a new client is answered. Up to three tries, each on a new
    // connection: one connection refused or reset is the kernel's or the client's
    // business; a listener that answers none has stopped serving.
    let healthy = (0..3).find_map(|_| {
        exchange(
            served.addr,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            false,
            false,
        )
        .filter(|(status, _)| *status == 200)
    });
    assert!(
        healthy.is_some(),
        "the listener stopped answering after {:?}",
        String::from_utf8_lossy(data)
    );
}
