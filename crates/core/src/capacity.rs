//! Maps keyed by pod or volume grow to the most a node held at once and keep that capacity
//! after the pods are gone. [`shrink_when_sparse`] hands most of it back once a map is mostly
//! empty, so a node whose pods come and go returns to its idle heap.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Capacity below which a map is left as it is (a few KiB at most).
const KEEP: usize = 64;

/// Shrinks `map` to twice its length once it holds fewer than a quarter of its capacity (and
/// more than 64 slots): call after removing. Growing back costs one rehash per
/// doubling, as growing did; alternating removals and insertions around the threshold cannot
/// rehash each time, since a shrunk map is half full.
pub fn shrink_when_sparse<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    if map.capacity() > KEEP && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_emptied_of_most_entries_gives_its_capacity_back_and_a_small_one_is_left_alone() {
        let mut map: HashMap<usize, [u8; 64]> = (0..1000).map(|i| (i, [0; 64])).collect();
        let full = map.capacity();
        for i in 0..900 {
            map.remove(&i);
            shrink_when_sparse(&mut map);
        }
        assert_eq!(map.len(), 100);
        assert!(map.capacity() < full / 4, "{} of {full}", map.capacity());
        assert!(map.capacity() >= 100);

        let mut small: HashMap<usize, u8> = (0..40).map(|i| (i, 0)).collect();
        small.retain(|k, _| *k < 2);
        // Measured after the removals: they may leave tombstones that lower the capacity
        // reported (hashbrown's), which is not what this checks.
        let before = small.capacity();
        shrink_when_sparse(&mut small);
        assert_eq!(small.capacity(), before);
    }
}
