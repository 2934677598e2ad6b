use std::process::ExitCode;

use clap::{CommandFactory as _, Parser as _};
use kubectl_fournos::cli::Cli;
use kubectl_fournos::complete;
use kubectl_fournos::error::Failure;
use kubectl_fournos::print;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // kubectl's completion of `kubectl fournos …`, through the kubectl_complete-fournos shim.
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if args.get(1).map(String::as_str) == Some(complete::REQUEST) {
        let mut answer = complete::complete(Cli::command(), &args[2..]);
        if let Some(query) = &answer.clusters {
            answer
                .candidates
                .extend(kubectl_fournos::cluster_names(query).await);
        }
        print!("{}", complete::render(&answer.candidates, answer.directive));
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    match kubectl_fournos::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The error may quote the apiserver, and so the cluster's objects.
            eprintln!("{}", print::lines(&format!("error: {error:#}")));
            ExitCode::from(
                error
                    .downcast_ref::<Failure>()
                    .map_or(1, Failure::exit_code),
            )
        }
    }
}
