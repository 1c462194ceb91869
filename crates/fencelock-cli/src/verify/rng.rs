//! A small seeded generator (SplitMix64): the same seed gives the same fault schedule and
//! the same hold times, with no dependency.

/// SplitMix64.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_same_seed_gives_the_same_numbers() {
        let mut a = super::Rng::new(7);
        let mut b = super::Rng::new(7);
        let xs: Vec<u64> = (0..5).map(|_| a.below(100)).collect();
        let ys: Vec<u64> = (0..5).map(|_| b.below(100)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| *x < 100));
        assert_ne!(super::Rng::new(8).next_u64(), super::Rng::new(7).next_u64());
    }
}
