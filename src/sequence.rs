//! A leaf: numbers unique within the process, for what tasklift names itself on
//! every call (its JSON-RPC ids upstream, its progress tokens), and numbers
//! written in decimal without `format!`.
//!
//! One counter shared by the front door's workers would have its cache line
//! written from both cores on every call. So a thread takes the numbers from a
//! block of its own, and only takes a new block (4,096 numbers) from the shared
//! counter when that one is used up.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many numbers a thread takes from the shared counter at once.
const BLOCK: u64 = 4096;

/// The first number of the next block any thread takes.
static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's block: the next number it hands out, and the block's end.
    static BLOCK_LEFT: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// A number no other call in this process gets (from 1; in increasing order
/// within a thread, not across threads).
pub fn next() -> u64 {
    BLOCK_LEFT.with(|b| {
        let (mut at, mut end) = b.get();
        if at == end {
            at = NEXT_BLOCK.fetch_add(BLOCK, Ordering::Relaxed);
            end = at + BLOCK;
        }
        b.set((at + 1, end));
        at
    })
}

/// `n`'s decimal digits, written by hand: `format!` was about 1% of the
/// instructions of a proxied call where a call writes a number.
pub fn decimal(mut n: u64) -> Decimal {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    Decimal { digits, at }
}

/// A number's decimal digits ([`decimal`]).
pub struct Decimal {
    digits: [u8; 20],
    at: usize,
}

impl Decimal {
    /// The digits, as ASCII.
    pub fn as_bytes(&self) -> &[u8] {
        &self.digits[self.at..]
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    #[test]
    fn numbers_from_several_threads_are_never_repeated() {
        // More than a block per thread, so each takes several blocks, the
        // threads interleaving on the shared counter.
        let per_thread = 3 * super::BLOCK as usize + 17;
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(move || (0..per_thread).map(|_| super::next()).collect()))
            .collect();
        let mut seen = HashSet::new();
        for t in threads {
            let numbers: Vec<u64> = t.join().expect("thread");
            assert!(
                numbers.windows(2).all(|w| w[0] < w[1]),
                "increasing within a thread"
            );
            for n in numbers {
                assert!(n >= 1);
                assert!(seen.insert(n), "{n} handed out twice");
            }
        }
        assert_eq!(seen.len(), 4 * per_thread);
    }

    #[test]
    fn decimals_are_written_as_format_writes_them() {
        for n in [0, 7, 10, 4096, 1_000_000_007, u64::MAX] {
            assert_eq!(super::decimal(n).as_bytes(), n.to_string().as_bytes());
        }
    }
}
