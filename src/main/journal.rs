//! Log lines for the systemd journal (`contrib/systemd/nodelet.service`):
//! [`stdout_is_journal`]: whether `JOURNAL_STREAM` names standard output, as systemd sets it
//! for a service whose output goes to the journal; then `--log-format auto` is
//! [`JournalFormat`]: no timestamps (the journal adds its own), no colours, and each line
//! prefixed with its syslog priority so `journalctl -p warning` filters by level.

use std::os::fd::AsFd;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, Full, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Whether standard output is the systemd journal: `JOURNAL_STREAM` is `<device>:<inode>` of
/// the stream systemd connected, compared with standard output's own (a child whose output was
/// redirected inherits the variable but not the stream).
pub(crate) fn stdout_is_journal() -> bool {
    let var = std::env::var("JOURNAL_STREAM").ok();
    is_journal_stream(var.as_deref(), std::io::stdout().as_fd())
}

fn is_journal_stream(var: Option<&str>, fd: std::os::fd::BorrowedFd<'_>) -> bool {
    let Some((dev, ino)) = var.and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    nix::sys::stat::fstat(fd).is_ok_and(|st| st.st_dev == dev && st.st_ino == ino)
}

/// Log lines for the journal: `<priority>` (sd-daemon's syslog prefix: 3 error, 4 warning, 6
/// info, 7 debug and trace), then the usual text line without its timestamp. Install it with
/// ANSI colours off.
#[derive(Debug)]
pub(crate) struct JournalFormat {
    inner: Format<Full, ()>,
}

impl Default for JournalFormat {
    fn default() -> Self {
        JournalFormat {
            inner: tracing_subscriber::fmt::format().without_time(),
        }
    }
}

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let priority = match *event.metadata().level() {
            Level::ERROR => 3,
            Level::WARN => 4,
            Level::INFO => 6,
            Level::DEBUG | Level::TRACE => 7,
        };
        write!(writer, "<{priority}>")?;
        self.inner.format_event(ctx, writer, event)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Collects what the subscriber writes.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut b) = self.0.lock() {
                b.extend_from_slice(buf);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn journal_lines_carry_the_priority_and_neither_timestamp_nor_colour() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .event_format(JournalFormat::default())
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(pod = "web", "volume not mounted");
            tracing::info!("nodelet started");
        });
        let text = String::from_utf8(buffer.0.lock().map(|b| b.clone()).unwrap_or_default())
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with("<4> WARN") && lines[0].contains("volume not mounted pod=\"web\""),
            "{text}"
        );
        assert!(lines[1].starts_with("<6> INFO"), "{text}");
        assert!(!text.contains('\u{1b}'), "no ANSI escapes: {text:?}");
        let year = chrono::Utc::now().format("%Y-").to_string();
        assert!(!text.contains(&year), "no timestamp: {text}");
    }

    #[test]
    fn journal_stream_must_name_the_stream_itself() {
        let file = tempfile::tempfile().unwrap_or_else(|e| panic!("{e}"));
        let st = nix::sys::stat::fstat(file.as_fd()).unwrap_or_else(|e| panic!("{e}"));
        let this = format!("{}:{}", st.st_dev, st.st_ino);
        assert!(is_journal_stream(Some(&this), file.as_fd()));
        let other = format!("{}:{}", st.st_dev, st.st_ino + 1);
        assert!(!is_journal_stream(Some(&other), file.as_fd()));
        assert!(!is_journal_stream(Some("garbage"), file.as_fd()));
        assert!(!is_journal_stream(None, file.as_fd()));
    }
}
