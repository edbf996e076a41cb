//! `eventgate completions <shell>`: the shell's completion script for this very
//! binary's command line, on stdout (what the Debian package installs).

use std::process::ExitCode;

use clap::{Args, CommandFactory, ValueEnum};

use super::{Cli, CliError};

/// The shells whose completion directories the package fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub(super) fn run(args: CompletionsArgs) -> Result<ExitCode, CliError> {
    let mut script = Vec::new();
    write(args.shell, &mut script);
    match std::io::Write::write_all(&mut std::io::stdout().lock(), &script) {
        // Read only in part (`| head`): what was wanted was read.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(source) => Err(CliError::Io {
            context: "cannot write the completion script to stdout".into(),
            source,
        }),
        Ok(()) => Ok(ExitCode::SUCCESS),
    }
}

/// The script for `shell`.
pub(crate) fn write(shell: Shell, out: &mut Vec<u8>) {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(shell, &mut Cli::command(), "eventgate", out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(shell: Shell) -> String {
        let mut out = Vec::new();
        write(shell, &mut out);
        String::from_utf8(out).expect("a UTF-8 script")
    }

    /// Each script completes the subcommands and their flags, as each shell reads them.
    #[test]
    fn each_script_knows_the_subcommands_and_their_flags() {
        let bash = script(Shell::Bash);
        assert!(bash.contains("complete -F _eventgate"), "{bash}");
        assert!(bash.contains("check-config") && bash.contains("--data-dir"));
        let zsh = script(Shell::Zsh);
        assert!(zsh.starts_with("#compdef eventgate"), "{zsh}");
        assert!(zsh.contains("check-config") && zsh.contains("--data-dir"));
        let fish = script(Shell::Fish);
        assert!(fish.contains("complete -c eventgate"), "{fish}");
        assert!(fish.contains("check-config") && fish.contains("data-dir"));
    }
}
