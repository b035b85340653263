//! Reload requests (FC-5, FC-6): a burst of volume updates for one container becomes one
//! delivery, after a quiet time; the delivery is a signal to the main process or a POST to a
//! local URL (as configmap-reload does).
//!
//! # The burst (FC-6)
//!
//! 1. The first update of a container with no burst open opens one: a task waits.
//! 2. Each later update restarts the quiet time: the burst ends when `quiet` passed without an
//!    update, or [`MAX_BURST`] after it opened, whichever comes first (a steady stream still
//!    gets a reload every [`MAX_BURST`]). Times are the updates' own (their `..data` swaps),
//!    not when they reached the burst: the way from the swap to here is not waited again.
//! 3. The burst closes (under the lock, so an update that arrives meanwhile opens the next
//!    one, or is taken into this one if it came before the close) and the delivery runs.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::options::ReloadUrl;

/// The longest a burst is held open (FC-6).
pub const MAX_BURST: Duration = Duration::from_secs(5);
/// How long a reload URL may take to answer.
pub const URL_TIMEOUT: Duration = Duration::from_secs(5);

/// Open bursts by key; a burst's task delivers once it ends. Each update carries its time.
#[derive(Debug)]
pub(crate) struct Bursts<K> {
    open: Arc<Mutex<HashMap<K, mpsc::UnboundedSender<Instant>>>>,
}

impl<K> Clone for Bursts<K> {
    fn clone(&self) -> Self {
        Self {
            open: self.open.clone(),
        }
    }
}

impl<K: Eq + Hash + Clone + Send + 'static> Bursts<K> {
    pub(crate) fn new() -> Self {
        Self {
            open: Arc::default(),
        }
    }

    /// One update for `key`, made at `at` (its `..data` swap): joins its open burst, or opens
    /// one whose end runs `deliver` (steps 1 to 3). `quiet` is the quiet time of a burst this
    /// opens. Times count from `at`, so the time the update took to get here is not waited
    /// again; an update already older than `quiet` ends a burst it opens at once.
    pub(crate) fn update<F>(&self, key: K, at: Instant, quiet: Duration, deliver: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut open = self.open.lock();
        if let Some(tx) = open.get(&key)
            && tx.send(at).is_ok()
        {
            return;
        }
        // (1)
        let (tx, mut rx) = mpsc::unbounded_channel();
        open.insert(key.clone(), tx);
        let bursts = self.clone();
        tokio::spawn(async move {
            let opened = at;
            let mut last = at;
            loop {
                // (2)
                last = wait_quiet(&mut rx, opened, last, quiet).await;
                // (3)
                let mut open = bursts.open.lock();
                if let Ok(t) = rx.try_recv()
                    && opened.elapsed() < MAX_BURST
                {
                    last = last.max(t);
                    continue;
                }
                open.remove(&key);
                break;
            }
            deliver.await;
        });
    }

    /// Whether a burst is open for `key`.
    #[cfg(test)]
    fn is_open(&self, key: &K) -> bool {
        self.open.lock().contains_key(key)
    }
}

/// (2) Returns (the time of the burst's last update) once `quiet` passed since its last
/// update (`last`, or a later one that came on `rx`), or at `opened + MAX_BURST`.
async fn wait_quiet(
    rx: &mut mpsc::UnboundedReceiver<Instant>,
    opened: Instant,
    mut last: Instant,
    quiet: Duration,
) -> Instant {
    let cap = opened + MAX_BURST;
    loop {
        let until = (last + quiet).min(cap);
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Some(at)) if Instant::now() < cap => last = last.max(at),
            _ => return last,
        }
    }
}

/// Why a POST to a reload URL failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadUrlError {
    /// No connection.
    #[error("POST {url}: connecting: {source}")]
    Connect {
        /// The URL.
        url: String,
        /// What failed underneath.
        #[source]
        source: std::io::Error,
    },
    /// The exchange failed after the connection.
    #[error("POST {url}: {source}")]
    Exchange {
        /// The URL.
        url: String,
        /// What failed underneath.
        #[source]
        source: std::io::Error,
    },
    /// No answer within [`URL_TIMEOUT`].
    #[error("POST {url}: no answer within {timeout:?}")]
    Timeout {
        /// The URL.
        url: String,
        /// The limit.
        timeout: Duration,
    },
    /// An answer that is not HTTP, or not a 2xx status.
    #[error("POST {url}: answered {status_line:?}")]
    Status {
        /// The URL.
        url: String,
        /// The response's first line.
        status_line: String,
    },
}

/// POSTs an empty body to `url` (HTTP/1.1, `Connection: close`); a 2xx status is success.
///
/// # Errors
/// [`ReloadUrlError`].
pub async fn post(url: &ReloadUrl) -> Result<(), ReloadUrlError> {
    let text = url.to_string();
    match tokio::time::timeout(URL_TIMEOUT, exchange(url, &text)).await {
        Ok(result) => result,
        Err(_) => Err(ReloadUrlError::Timeout {
            url: text,
            timeout: URL_TIMEOUT,
        }),
    }
}

async fn exchange(url: &ReloadUrl, text: &str) -> Result<(), ReloadUrlError> {
    let host = url.host.trim_start_matches('[').trim_end_matches(']');
    let mut tcp = TcpStream::connect((host, url.port))
        .await
        .map_err(|source| ReloadUrlError::Connect {
            url: text.to_owned(),
            source,
        })?;
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: nodelet-reload\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n",
        url.path, url.host, url.port
    );
    let io_err = |source| ReloadUrlError::Exchange {
        url: text.to_owned(),
        source,
    };
    tcp.write_all(request.as_bytes()).await.map_err(io_err)?;
    // The status line is all that is read; the rest of the answer is dropped with the socket.
    let mut head = Vec::with_capacity(128);
    let mut buf = [0u8; 128];
    while !head.contains(&b'\n') && head.len() < 1024 {
        let n = tcp.read(&mut buf).await.map_err(io_err)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let status_line = String::from_utf8_lossy(line).trim_end().to_owned();
    let mut parts = status_line.split(' ');
    let ok = parts.next().is_some_and(|v| v.starts_with("HTTP/1."))
        && parts
            .next()
            .is_some_and(|s| s.len() == 3 && s.starts_with('2'));
    if ok {
        Ok(())
    } else {
        Err(ReloadUrlError::Status {
            url: text.to_owned(),
            status_line,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncBufReadExt as _, BufReader};
    use tokio::net::TcpListener;

    use super::*;

    const QUIET: Duration = Duration::from_millis(100);

    fn counter() -> (
        Arc<AtomicUsize>,
        impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    ) {
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        let deliver = move || {
            let c = c.clone();
            Box::pin(async move {
                c.fetch_add(1, Ordering::SeqCst);
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        };
        (count, deliver)
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_updates_closer_than_the_quiet_time_gives_one_delivery() {
        let bursts = Bursts::new();
        let (count, deliver) = counter();
        for _ in 0..5 {
            bursts.update("app", Instant::now(), QUIET, deliver());
            tokio::time::sleep(QUIET / 2).await;
        }
        assert_eq!(count.load(Ordering::SeqCst), 0, "the burst is still open");
        tokio::time::sleep(QUIET).await;
        assert_eq!(count.load(Ordering::SeqCst), 1);
        assert!(!bursts.is_open(&"app"));
    }

    #[tokio::test(start_paused = true)]
    async fn updates_further_apart_than_the_quiet_time_are_delivered_each() {
        let bursts = Bursts::new();
        let (count, deliver) = counter();
        for i in 1..=3 {
            bursts.update("app", Instant::now(), QUIET, deliver());
            tokio::time::sleep(QUIET * 2).await;
            assert_eq!(count.load(Ordering::SeqCst), i);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_delivery_comes_only_after_the_quiet_time() {
        let bursts = Bursts::new();
        let (count, deliver) = counter();
        bursts.update("app", Instant::now(), QUIET, deliver());
        tokio::time::sleep(QUIET - Duration::from_millis(1)).await;
        assert_eq!(count.load(Ordering::SeqCst), 0);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_is_delivered_at_least_once_per_max_burst() {
        let bursts = Bursts::new();
        let (count, deliver) = counter();
        // An update every 50 ms for 12 s, never quiet for 100 ms.
        for _ in 0..240 {
            bursts.update("app", Instant::now(), QUIET, deliver());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(QUIET * 2).await;
        let n = count.load(Ordering::SeqCst);
        assert!((2..=3).contains(&n), "{n} deliveries");
    }

    #[tokio::test(start_paused = true)]
    async fn containers_have_bursts_of_their_own() {
        let bursts = Bursts::new();
        let (count, deliver) = counter();
        bursts.update("app", Instant::now(), QUIET, deliver());
        bursts.update("side", Instant::now(), QUIET, deliver());
        bursts.update("app", Instant::now(), QUIET, deliver());
        tokio::time::sleep(QUIET * 2).await;
        assert_eq!(count.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_quiet_time_counts_from_the_update_not_from_its_arrival() {
        let bursts = Bursts::new();
        let (count, deliver) = counter();
        // Swapped 60 ms ago, told only now: 40 ms of the quiet time are left.
        bursts.update(
            "app",
            Instant::now() - Duration::from_millis(60),
            QUIET,
            deliver(),
        );
        tokio::time::sleep(Duration::from_millis(39)).await;
        assert_eq!(count.load(Ordering::SeqCst), 0);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(count.load(Ordering::SeqCst), 1);
        // Older than the quiet time: delivered at once.
        bursts.update("app", Instant::now() - QUIET * 2, QUIET, deliver());
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(count.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn updates_told_late_but_made_close_together_are_one_burst() {
        let bursts = Bursts::new();
        let (count, deliver) = counter();
        let first = Instant::now();
        bursts.update("app", first, QUIET, deliver());
        // Told 90 ms after the first, made 60 ms after it: one burst, ending 100 ms after the
        // second was made.
        tokio::time::sleep(Duration::from_millis(90)).await;
        let second = first + Duration::from_millis(60);
        bursts.update("app", second, QUIET, deliver());
        tokio::time::sleep_until(second + QUIET - Duration::from_millis(1)).await;
        assert_eq!(count.load(Ordering::SeqCst), 0);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(count.load(Ordering::SeqCst), 1);
        assert!(!bursts.is_open(&"app"));
    }

    /// A one-request server answering `status`; returns its URL and the request it got.
    async fn server(status: &'static str) -> (ReloadUrl, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut reader = BufReader::new(tcp);
            let mut request = String::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).await.unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                request.push_str(&line);
            }
            let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
            reader.get_mut().write_all(answer.as_bytes()).await.unwrap();
            request
        });
        let url = format!("http://127.0.0.1:{port}/-/reload").parse().unwrap();
        (url, task)
    }

    #[tokio::test]
    async fn a_reload_url_gets_an_empty_post_and_a_2xx_is_success() {
        let (url, request) = server("200 OK").await;
        post(&url).await.unwrap();
        let request = request.await.unwrap();
        assert!(
            request.starts_with("POST /-/reload HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(request.contains("Content-Length: 0\r\n"));
    }

    #[tokio::test]
    async fn a_reload_url_answering_an_error_status_fails_naming_it() {
        let (url, _request) = server("500 Internal Server Error").await;
        let err = post(&url).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("POST {url}: answered \"HTTP/1.1 500 Internal Server Error\"")
        );
    }

    #[tokio::test]
    async fn a_reload_url_nobody_listens_on_fails_to_connect() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url: ReloadUrl = format!("http://127.0.0.1:{port}/").parse().unwrap();
        let err = post(&url).await.unwrap_err();
        assert!(matches!(err, ReloadUrlError::Connect { .. }), "{err}");
    }
}
