//! `eventgate top`: `eventgate status` redrawn every second until q or Ctrl-C.

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tokio::sync::mpsc;

use super::CliError;
use super::status::render;
use crate::admin::client;
use crate::admin::settings::DEFAULT_LISTEN;
use crate::units::parse_duration;

#[derive(Debug, Args)]
pub struct TopArgs {
    /// The gateway's admin endpoint (its `admin.listen`).
    #[arg(long, value_name = "ADDR", env = "EVENTGATE_ADMIN", default_value = DEFAULT_LISTEN)]
    pub admin: String,
    /// Time between refreshes.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
}

pub(super) async fn run(args: TopArgs) -> Result<ExitCode, CliError> {
    let interval = args.interval.max(Duration::from_millis(100));
    let _terminal = KeyMode::enter();
    let mut keys = keys();
    let mut stdin_open = true;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut previous = None;
    let mut ticks = tokio::time::interval(interval);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            key = keys.recv(), if stdin_open => match key {
                Some(b'q' | b'Q') => break,
                Some(_) => continue,
                // stdin closed: keep refreshing; Ctrl-C still quits.
                None => {
                    stdin_open = false;
                    continue;
                }
            },
            _ = &mut ctrl_c => break,
        }
        let screen = match client::status(&args.admin, interval.max(Duration::from_secs(1))).await {
            Ok(status) => {
                let screen = render(&status, previous.as_ref());
                previous = Some(status);
                screen
            }
            Err(error) => {
                previous = None;
                format!("{:#}\n", anyhow::Error::from(error))
            }
        };
        let mut stdout = std::io::stdout().lock();
        // Home, clear, draw; then the hint.
        let _ = write!(stdout, "\x1b[H\x1b[2J{screen}\n(q or Ctrl-C quits)\n");
        let _ = stdout.flush();
    }
    Ok(ExitCode::SUCCESS)
}

/// Key presses from stdin, read on a thread (stdin has no async read that can be
/// abandoned). The channel closes when stdin does.
fn keys() -> mpsc::Receiver<u8> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut byte = [0u8; 1];
        while let Ok(1) = stdin.read(&mut byte) {
            if tx.blocking_send(byte[0]).is_err() {
                break;
            }
        }
    });
    rx
}

/// Single key presses without Enter or echo while `top` runs; the terminal's mode is
/// restored when this is dropped. Does nothing when stdin is not a terminal.
struct KeyMode {
    saved: Option<libc::termios>,
}

impl KeyMode {
    fn enter() -> Self {
        if !std::io::stdin().is_terminal() {
            return Self { saved: None };
        }
        // SAFETY: tcgetattr/tcsetattr on fd 0 with a termios we own; failures leave
        // the terminal as it was.
        unsafe {
            let mut mode: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut mode) != 0 {
                return Self { saved: None };
            }
            let saved = mode;
            mode.c_lflag &= !(libc::ICANON | libc::ECHO);
            mode.c_cc[libc::VMIN] = 1;
            mode.c_cc[libc::VTIME] = 0;
            if libc::tcsetattr(0, libc::TCSANOW, &mode) != 0 {
                return Self { saved: None };
            }
            Self { saved: Some(saved) }
        }
    }
}

impl Drop for KeyMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            // SAFETY: restores the mode read in `enter`.
            unsafe {
                libc::tcsetattr(0, libc::TCSANOW, saved);
            }
        }
    }
}
