//! `tidemark`, the operator CLI: parse the command line and run it (see the library,
//! `tidemark_cli`, for the commands).

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = tidemark_cli::Cli::parse();
    tidemark::telemetry::init("warn");
    let mut stdout = std::io::stdout();
    tidemark_cli::main_with(cli, &mut stdout).await
}
