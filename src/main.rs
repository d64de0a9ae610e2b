//! The `pinfleet` binary: parse the command line, run, map errors to exit codes.

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = pinfleet::cli::parse();
    pinfleet::cli::init_tracing(cli.global.verbose, cli.global.log_json);
    match pinfleet::cli::run(cli) {
        Ok(code) => code,
        // `pinfleet render x | head` closing the pipe early is not an error.
        Err(err)
            if err.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(err) => {
            pinfleet::cli::report_error(&err);
            ExitCode::from(1)
        }
    }
}
