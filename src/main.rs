//! The `tasklift` command: parse, set up logging, load and validate the
//! configuration (exit 64 when it is invalid, before any port is bound), run until
//! SIGINT/SIGTERM, then shut down in order.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tasklift::cli::{Cli, Command, LogFormat, Overrides};
use tasklift::config::RawConfig;

/// EX_CONFIG-style exit code for a bad configuration.
const EXIT_CONFIG: u8 = 64;

fn init_tracing(format: LogFormat, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    let colour = std::io::stderr().is_terminal();
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Pretty if colour => b.init(),
        // The same text, written without the styling machinery: a fifth of the
        // work of opening each request's span.
        LogFormat::Pretty => b.fmt_fields(tasklift::observe::fields::PlainFields).init(),
        LogFormat::Json => b.json().init(),
    }
}

fn load(
    file: Option<&std::path::Path>,
    overrides: &Overrides,
) -> Result<RawConfig, tasklift::config::ConfigError> {
    let mut raw = match file {
        Some(f) => RawConfig::from_file(f)?,
        None => RawConfig::default(),
    };
    raw.telemetry.apply_env(|k| std::env::var(k).ok());
    overrides.apply(&mut raw)?;
    Ok(raw)
}

/// mimalloc: glibc's malloc took a tenth of tasklift's CPU per proxied request
/// (docs/benchmarks/results.md) and fragments per thread under many running tasks.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { file, overrides } => {
            match load(Some(&file), &overrides).and_then(|r| r.validate().map(|c| (r, c))) {
                // The raw form prints; the valid one knows what to warn about.
                Ok((raw, valid)) => {
                    println!("# {}: valid.", file.display());
                    for w in valid.warnings() {
                        println!("# warning: {w}");
                    }
                    println!("# Effective configuration (secrets shown as <redacted>):\n");
                    print!("{}", raw.to_toml());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("tasklift: invalid configuration: {e}");
                    ExitCode::from(EXIT_CONFIG)
                }
            }
        }
        Command::Serve(args) => {
            let cfg = match load(args.config.as_deref(), &args.overrides).and_then(|r| r.validate())
            {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("tasklift: invalid configuration: {e}");
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            init_tracing(cli.log_format, "info");
            // The front door's other workers are threads of their own (src/workers.rs);
            // this one is worker 0 and runs the rest of tasklift beside it.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            report(rt.block_on(serve(cfg)))
        }
        Command::Store { cmd } => {
            init_tracing(cli.log_format, "warn");
            tasklift::cli::store::run(cmd)
        }
        Command::Call(args) => {
            init_tracing(cli.log_format, "warn");
            tasklift::cli::call::run(args)
        }
        Command::Health(args) => tasklift::cli::health::run(args),
        #[cfg(feature = "demo")]
        Command::Demo { keep_data } => {
            init_tracing(cli.log_format, "warn");
            report(runtime().block_on(tasklift::cli::demo::run(keep_data)))
        }
        #[cfg(feature = "demo")]
        Command::DemoServer(tasklift_fixture::ServeArgs {
            listen,
            stdio,
            modern,
            serial,
        }) => {
            if stdio {
                // stdout carries the protocol: logs go to stderr only.
                init_tracing(cli.log_format, "warn");
                let opts = tasklift_fixture::stdio::StdioOptions {
                    modern,
                    serial,
                    ..Default::default()
                };
                let fixture = tasklift_fixture::stdio::stdio_fixture();
                return report(runtime().block_on(async {
                    tasklift_fixture::stdio::serve(fixture, opts)
                        .await
                        .map_err(anyhow::Error::from)
                }));
            }
            init_tracing(cli.log_format, "info");
            report(runtime().block_on(tasklift_fixture::serve_http(&listen, shutdown_signal())))
        }
    }
}

/// The runtime of `demo` and `demo-server` (`serve` has its own, see above).
#[cfg(feature = "demo")]
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn report(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tasklift: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(cfg: tasklift::config::Config) -> anyhow::Result<()> {
    let running = tasklift::app::start(cfg).await.context("cannot start")?;
    shutdown_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
