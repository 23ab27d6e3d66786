//! The log filter: `RUST_LOG`, or the default level, read by `EnvFilter`.
//!
//! `EnvFilter` keeps a table of the spans its span and field directives
//! (`target[span{field=value}]=level`) match, and looks every span up in it
//! under a process-wide `RwLock` when it is entered, exited, recorded or
//! closed, whether or not any directive could match. A request's span is
//! entered and exited on every poll of its future (about five times a proxied
//! call), from both workers, so that lock's cache line went back and forth
//! between the cores on every call. Without such directives (the default, and
//! nearly every `RUST_LOG` in use) the table stays empty and those lookups
//! change nothing: [`LogFilter`] then asks the filter only which callsites and
//! levels are enabled.

use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{span, Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::EnvFilter;

/// `RUST_LOG` as `EnvFilter` reads it, or `default` when it is unset or does
/// not parse ([`from_spec`]).
pub fn from_env(default: &str) -> (LogFilter, Option<String>) {
    from_spec(std::env::var("RUST_LOG").ok().as_deref(), default)
}

/// The filter `spec` writes, or `default`'s when there is none or it does not
/// parse (as `EnvFilter::try_from_default_env` falls back; `default`'s
/// directives that do not parse are left out, as `EnvFilter::new` does), with
/// what to warn about then: a `RUST_LOG` set and not read, said once logging
/// works, is one an operator can fix; left out silently, their debug lines just
/// never come.
pub fn from_spec(spec: Option<&str>, default: &str) -> (LogFilter, Option<String>) {
    let fallback = || LogFilter::with(EnvFilter::new(default), default);
    let Some(spec) = spec else {
        return (fallback(), None);
    };
    match LogFilter::parse(spec) {
        Ok(filter) => (filter, None),
        Err(e) => {
            let why = format!(
                "RUST_LOG={spec:?} does not parse ({e}); logging with the default {default:?}"
            );
            (fallback(), Some(why))
        }
    }
}

/// An `EnvFilter`, told whether its directives name spans or fields.
pub struct LogFilter {
    filter: EnvFilter,
    /// Whether any directive has a span or field part: only then does the
    /// filter need to follow spans.
    follows_spans: bool,
}

impl LogFilter {
    /// The filter `spec` (`RUST_LOG`'s syntax) writes, or why it does not parse.
    pub fn parse(spec: &str) -> Result<Self, tracing_subscriber::filter::ParseError> {
        Ok(Self::with(EnvFilter::try_new(spec)?, spec))
    }

    /// `filter`, read from `spec`.
    fn with(filter: EnvFilter, spec: &str) -> Self {
        Self {
            filter,
            // A directive's span and field filters are written in brackets.
            follows_spans: spec.contains('['),
        }
    }

    /// Whether the filter follows spans (has span or field directives).
    pub fn follows_spans(&self) -> bool {
        self.follows_spans
    }
}

impl<S: Subscriber> Layer<S> for LogFilter {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        Layer::<S>::register_callsite(&self.filter, metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        Layer::<S>::enabled(&self.filter, metadata, ctx)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Layer::<S>::max_level_hint(&self.filter)
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        Layer::<S>::event_enabled(&self.filter, event, ctx)
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        if self.follows_spans {
            Layer::<S>::on_new_span(&self.filter, attrs, id, ctx);
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        if self.follows_spans {
            Layer::<S>::on_record(&self.filter, id, values, ctx);
        }
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        if self.follows_spans {
            Layer::<S>::on_enter(&self.filter, id, ctx);
        }
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        if self.follows_spans {
            Layer::<S>::on_exit(&self.filter, id, ctx);
        }
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        if self.follows_spans {
            Layer::<S>::on_close(&self.filter, id, ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    use super::LogFilter;
    use crate::observe::CapturedLog;

    /// What is logged under `spec`: an info and a debug line inside a
    /// `request` span for `tools/call`, then the same inside one for `ping`.
    fn logged(spec: &str) -> (bool, String) {
        let log = CapturedLog::default();
        let filter = LogFilter::parse(spec).expect("a valid filter");
        let follows = filter.follows_spans();
        let writer = log.clone();
        let subscriber = tracing_subscriber::registry().with(filter).with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || writer.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            for method in ["tools/call", "ping"] {
                let span = tracing::info_span!("request", method);
                let _in = span.enter();
                tracing::info!("info in {method}");
                tracing::debug!("debug in {method}");
            }
            tracing::warn!("warn outside");
        });
        (follows, log.text())
    }

    #[test]
    fn levels_alone_filter_as_env_filter_does() {
        let (follows, text) = logged("info");
        assert!(!follows);
        assert!(text.contains("info in tools/call") && text.contains("info in ping"));
        assert!(text.contains("request{method=\"tools/call\"}: "), "{text}");
        assert!(!text.contains("debug in"), "{text}");
        assert!(text.contains("warn outside"));
        // A filter that does not parse is refused; `from_spec` then uses the
        // default, and says why.
        assert!(LogFilter::parse("tasklift=loudest").is_err());
        let (filter, warning) = super::from_spec(Some("tasklift=loudest"), "warn");
        assert!(!filter.follows_spans());
        let warning = warning.expect("a warning");
        assert!(
            warning.contains("RUST_LOG=\"tasklift=loudest\" does not parse")
                && warning.contains("\"warn\""),
            "{warning}"
        );
        assert!(super::from_spec(Some("debug"), "warn").1.is_none());
        assert!(super::from_spec(None, "warn").1.is_none());
        let (_, text) = logged("warn");
        assert!(
            !text.contains("info in") && text.contains("warn outside"),
            "{text}"
        );
    }

    #[test]
    fn span_and_field_directives_still_follow_spans() {
        // Debug inside the tools/call request span only, warn elsewhere.
        let (follows, text) = logged("warn,[request{method=tools/call}]=debug");
        assert!(follows);
        assert!(text.contains("debug in tools/call"), "{text}");
        assert!(text.contains("info in tools/call"), "{text}");
        assert!(!text.contains("in ping"), "{text}");
        assert!(text.contains("warn outside"));
    }
}
