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
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let (filter, unread) = tasklift::observe::log_filter::from_env(default);
    let colour = std::io::stderr().is_terminal();
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let with_filter = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Pretty if colour => with_filter.with(logs).init(),
        // The same text, written without the styling machinery: a fifth of the
        // work of opening each request's span.
        LogFormat::Pretty => with_filter
            .with(logs.fmt_fields(tasklift::observe::fields::PlainFields))
            .init(),
        LogFormat::Json => with_filter.with(logs.json()).init(),
    }
    if let Some(why) = unread {
        tracing::warn!("{why}");
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
static ALLOC: allocator::Mimalloc = allocator::Mimalloc;

/// mimalloc asked the way it is fastest. The `mimalloc` crate passes every
/// allocation's alignment to `mi_malloc_aligned`. In mimalloc 3, once the page
/// of a size class has no free block left, that function serves a size that is
/// not a power of two (48 bytes, say) by over-allocating from the next class up,
/// and it keeps doing so: the class's freed blocks are only gathered by the
/// plain allocation path. So about 7 of the 60 allocations of a proxied call
/// took the slow path, at some 230 instructions each. Every mimalloc block is
/// aligned to a word, so an alignment of a word or less (nearly all of Rust's)
/// goes to `mi_malloc`, and only a larger one to `mi_malloc_aligned`; as
/// `std`'s own `System` allocator does with `malloc`.
#[cfg(feature = "mimalloc")]
mod allocator {
    use std::alloc::{GlobalAlloc, Layout};

    use libmimalloc_sys as mi;

    /// The alignment every mimalloc block has: a word (its smallest size class
    /// is a word, and every class is a multiple of one).
    const WORD: usize = std::mem::size_of::<usize>();

    pub struct Mimalloc;

    // SAFETY: each method hands mimalloc's answer on unchanged; mimalloc returns
    // null when it has no memory, as `GlobalAlloc` requires, and a block of at
    // least the size asked, aligned to a word (the plain calls, used only for an
    // alignment of a word or less) or to the alignment asked (the aligned ones).
    // Blocks from either kind of call are freed and resized by `mi_free` and
    // `mi_realloc*`.
    unsafe impl GlobalAlloc for Mimalloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let p = match layout.align() <= WORD {
                true => unsafe { mi::mi_malloc(layout.size()) },
                false => unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()) },
            };
            p.cast()
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            let p = match layout.align() <= WORD {
                true => unsafe { mi::mi_zalloc(layout.size()) },
                false => unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()) },
            };
            p.cast()
        }

        unsafe fn dealloc(&self, ptr: *mut u8, _: Layout) {
            unsafe { mi::mi_free(ptr.cast()) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let p = match layout.align() <= WORD {
                true => unsafe { mi::mi_realloc(ptr.cast(), new_size) },
                false => unsafe { mi::mi_realloc_aligned(ptr.cast(), new_size, layout.align()) },
            };
            p.cast()
        }
    }

    #[cfg(test)]
    mod tests {
        use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, Layout};

        /// Blocks of every size class up to 64 KiB and every alignment up to
        /// 4 KiB come back aligned as asked, hold what is written into them,
        /// keep it through a resize, and come back zeroed when asked; many are
        /// held at once, so size classes run out of free blocks and take
        /// mimalloc's slow paths too.
        #[test]
        fn blocks_are_aligned_as_asked_and_keep_their_bytes() {
            let mut held = Vec::new();
            for round in 0..40u8 {
                for shift in 0..=12 {
                    let align = 1usize << shift;
                    for size in [1, 7, 8, 24, 48, 100, 1000, 1025, 4096, 5000, 65536] {
                        let layout = Layout::from_size_align(size, align).unwrap();
                        // SAFETY: the layout's size is not zero; each block is
                        // written within its size and freed with its layout.
                        unsafe {
                            let zeroed = alloc_zeroed(layout);
                            assert!(!zeroed.is_null());
                            assert_eq!(zeroed as usize % align, 0, "{size} by {align}");
                            assert!(std::slice::from_raw_parts(zeroed, size)
                                .iter()
                                .all(|&b| b == 0));
                            let p = alloc(layout);
                            assert!(!p.is_null());
                            assert_eq!(p as usize % align, 0, "{size} by {align}");
                            std::ptr::write_bytes(p, round, size);
                            let grown = realloc(p, layout, size * 3);
                            assert_eq!(grown as usize % align, 0, "{size} by {align}, grown");
                            let kept = std::slice::from_raw_parts(grown, size);
                            assert!(kept.iter().all(|&b| b == round), "{size} by {align}");
                            dealloc(zeroed, layout);
                            held.push((grown, Layout::from_size_align(size * 3, align).unwrap()));
                        }
                    }
                }
                // Free every other block: the classes' pages get holes to reuse.
                let (kept, freed): (Vec<_>, Vec<_>) =
                    held.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
                for (_, (p, l)) in freed {
                    // SAFETY: allocated above with this layout, freed once.
                    unsafe { dealloc(p, l) }
                }
                held = kept.into_iter().map(|(_, block)| block).collect();
            }
            for (p, l) in held {
                // SAFETY: allocated above with this layout, freed once.
                unsafe { dealloc(p, l) }
            }
        }
    }
}

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
