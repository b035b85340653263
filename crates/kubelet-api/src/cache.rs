//! [`TtlCache`]: the answers of token and access reviews, kept for a while as the kubelet's
//! webhook authenticator and authorizer keep them.

use std::hash::Hash;
use std::num::NonZeroUsize;
use std::time::Duration;

use lru::LruCache;
use parking_lot::Mutex;
use tokio::time::Instant;

/// At most this many answers are kept; the least recently used goes first.
const CAPACITY: NonZeroUsize = match NonZeroUsize::new(1024) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};

/// Answers that expire: each entry is kept for the time it was inserted with.
pub(super) struct TtlCache<K: Hash + Eq, V> {
    entries: Mutex<LruCache<K, (V, Instant)>>,
}

impl<K: Hash + Eq, V: Clone> TtlCache<K, V> {
    /// An empty cache.
    pub(super) fn new() -> Self {
        Self {
            entries: Mutex::new(LruCache::new(CAPACITY)),
        }
    }

    /// The answer for `key`, unless there is none or it expired.
    pub(super) fn get(&self, key: &K) -> Option<V> {
        let mut entries = self.entries.lock();
        match entries.get(key) {
            Some((value, expires)) if *expires > Instant::now() => Some(value.clone()),
            Some(_) => {
                entries.pop(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `key` during `ttl`; a zero `ttl` keeps nothing.
    pub(super) fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        self.entries.lock().put(key, (value, Instant::now() + ttl));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_answer_is_kept_for_its_ttl_and_forgotten_after() {
        let cache = TtlCache::new();
        cache.insert("allowed", true, Duration::from_secs(300));
        cache.insert("denied", false, Duration::from_secs(30));
        cache.insert("never", true, Duration::ZERO);
        assert_eq!(cache.get(&"allowed"), Some(true));
        assert_eq!(cache.get(&"denied"), Some(false));
        assert_eq!(cache.get(&"never"), None);

        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(cache.get(&"denied"), None);
        assert_eq!(cache.get(&"allowed"), Some(true));

        tokio::time::advance(Duration::from_secs(270)).await;
        assert_eq!(cache.get(&"allowed"), None);
    }
}
