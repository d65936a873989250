//! The pipeline's random numbers: SplitMix64, written out so that a seed
//! gives the same order on every platform and every version of every
//! dependency (a shuffled order is part of a run's reproducibility).

/// SplitMix64's output function: a bijective mix of 64 bits.
pub(crate) fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A SplitMix64 stream.
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0.wrapping_sub(0x9e37_79b9_7f4a_7c15))
    }

    /// A number in `0..n` (`n > 0`), by the multiply-high map: its bias is
    /// below n / 2^64, far under anything a shuffle buffer could show.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = SplitMix64::new(7);
        let mut seen = [0usize; 5];
        for _ in 0..1000 {
            seen[rng.below(5)] += 1;
        }
        assert!(seen.iter().all(|&c| c > 150), "{seen:?}");
    }

    #[test]
    fn splitmix_matches_its_reference_values() {
        // The first outputs of SplitMix64 seeded with 0, as its reference
        // C implementation prints them.
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }
}
