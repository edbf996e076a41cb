use std::process::ExitCode;

use clap::Parser;
use eventgate::internal::cli::{self, Cli};

// glibc's malloc showed up as a tenth of the gateway's CPU on the publish path (every
// HTTP/2 stream, frame and event allocates); mimalloc's thread-local free lists are
// cheaper for this many small, short-lived allocations. See the README's benchmarks.
// Built without transparent huge pages (`no_thp`): with them, its arenas were faulted
// in 2 MiB at a time and the peak RSS in the forwarder benchmark went from 17-20 MiB
// (glibc) to 22-50 MiB; without them it is back to glibc's figures.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::init_tracing(&cli.log);
    let runtime = match cli::runtime(&cli.runtime) {
        Ok(runtime) => runtime,
        Err(error) => {
            eventgate::console_error!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(cli::run(cli));
    // Everything that matters (spool, cursors, forwarders) is closed by now; blocking
    // calls still running (a librdkafka metadata request to an unreachable broker)
    // must not hold the exit up for their whole timeout.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match outcome {
        Ok(code) => code,
        Err(error) => {
            let code = error.exit_code();
            eventgate::console_error!("error: {:#}", anyhow::Error::from(error));
            code
        }
    }
}
