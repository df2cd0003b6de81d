//! Buffers reused from one fuzz case to the next: decoding allocates
//! nothing per answer once the first cases have run.
//!
//! Why (fuzz/README.md, "Speed"): an answer in a script owns its header
//! values (`Vec<u8>`) and rate-limit header names (`String`), and a case
//! owns its script (`Vec<Input>`, several KiB: large enough that each
//! allocation made glibc consolidate its small free chunks). Decoding a
//! case took a dozen allocations and the case's drop as many frees, per
//! execution. The decoders take their buffers from here instead (cleared,
//! so a value holds exactly the bytes it did when freshly allocated), and
//! a case that [recycles](recycle_script) its script on
//! [`Case::dispose`](super::Case::dispose) gives them back. Without
//! recycling (the other targets, the replay tests) the spares are empty
//! and decoding allocates as before: the decoded values are the same
//! either way (`tests/fuzz_spare.rs` checks every committed corpus input).
//!
//! One set per thread; a bounded number of buffers of bounded size is
//! kept, so a long run does not grow it.

use std::cell::RefCell;

use crate::script::Input;

/// At most this many spare buffers of each kind.
const MAX_SPARE: usize = 512;
/// Spare byte buffers and names larger than this are freed, not kept.
const MAX_BYTES: usize = 1024;
/// A new byte buffer's capacity: room for every header value the
/// decoders write but the hostile ones (zero-padded digits, up to 80 any
/// bytes), so that a spare buffer rarely has to grow.
const NEW_BYTES: usize = 64;
/// A new name's capacity: the longest rate-limit header name is 21 bytes.
const NEW_NAME: usize = 32;
/// A new header list's capacity: an answer has at most 3 rate-limit
/// headers.
const NEW_HEADERS: usize = 3;

/// Header values and names, header lists and scripts, empty, with their
/// capacity.
struct Spare {
    bytes: Vec<Vec<u8>>,
    names: Vec<String>,
    headers: Vec<Vec<(String, Vec<u8>)>>,
    scripts: Vec<Vec<Input>>,
}

thread_local! {
    static SPARE: RefCell<Spare> = const {
        RefCell::new(Spare {
            bytes: Vec::new(),
            names: Vec::new(),
            headers: Vec::new(),
            scripts: Vec::new(),
        })
    };
}

/// An empty byte buffer (a spare one when there is one).
pub(super) fn bytes() -> Vec<u8> {
    SPARE
        .with_borrow_mut(|s| s.bytes.pop())
        .unwrap_or_else(|| Vec::with_capacity(NEW_BYTES))
}

/// A buffer holding `value`.
pub(super) fn bytes_of(value: &[u8]) -> Vec<u8> {
    let mut b = bytes();
    b.extend_from_slice(value);
    b
}

/// A `String` holding `value`.
pub(super) fn name_of(value: &str) -> String {
    let mut n = SPARE
        .with_borrow_mut(|s| s.names.pop())
        .unwrap_or_else(|| String::with_capacity(NEW_NAME));
    n.push_str(value);
    n
}

/// An empty header list.
pub(super) fn headers() -> Vec<(String, Vec<u8>)> {
    SPARE
        .with_borrow_mut(|s| s.headers.pop())
        .unwrap_or_else(|| Vec::with_capacity(NEW_HEADERS))
}

/// An empty script with room for `capacity` inputs.
pub(super) fn script(capacity: usize) -> Vec<Input> {
    let mut script = SPARE
        .with_borrow_mut(|s| s.scripts.pop())
        .unwrap_or_default();
    script.reserve(capacity);
    script
}

/// Gives `script`'s buffers (header values, names and lists, the script
/// itself) back, emptied, for the next cases to decode into.
pub(super) fn recycle_script(mut script: Vec<Input>) {
    SPARE.with_borrow_mut(|s| {
        for input in script.drain(..) {
            if let Input::Answer(a) = input {
                s.keep_bytes(a.retry_after);
                s.keep_bytes(a.date);
                let mut headers = a.headers;
                for (mut name, value) in headers.drain(..) {
                    if s.names.len() < MAX_SPARE && name.capacity() <= MAX_BYTES {
                        name.clear();
                        s.names.push(name);
                    }
                    s.keep_bytes(Some(value));
                }
                if s.headers.len() < MAX_SPARE && headers.capacity() > 0 {
                    s.headers.push(headers);
                }
            }
        }
        if s.scripts.len() < MAX_SPARE {
            s.scripts.push(script);
        }
    });
}

impl Spare {
    fn keep_bytes(&mut self, b: Option<Vec<u8>>) {
        if let Some(mut b) = b
            && self.bytes.len() < MAX_SPARE
            && b.capacity() > 0
            && b.capacity() <= MAX_BYTES
        {
            b.clear();
            self.bytes.push(b);
        }
    }
}

/// `n` in decimal, appended to `out` (what `n.to_string()` writes, without
/// the formatter).
pub(super) fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// `n` in decimal, in a buffer.
pub(super) fn decimal(n: u64) -> Vec<u8> {
    let mut b = bytes();
    push_decimal(&mut b, n);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_is_to_string() {
        let mut x: u64 = 1;
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            120,
            400,
            5_000,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ]
        .into_iter()
        .chain((0..200).map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            x >> (x % 64)
        })) {
            assert_eq!(decimal(n), n.to_string().into_bytes(), "{n}");
        }
    }

    #[test]
    fn recycled_buffers_come_back_empty() {
        let a = crate::script::Answer {
            status: 429,
            retry_after: Some(b"garbage".to_vec()),
            date: Some(b"more garbage".to_vec()),
            job: None,
            generation: None,
            headers: vec![("RateLimit".to_owned(), b"x".to_vec())],
            retry_class: None,
            late: false,
            pick: 0,
            after: std::time::Duration::ZERO,
        };
        recycle_script(vec![Input::Answer(a)]);
        assert_eq!(bytes_of(b"1"), b"1");
        assert_eq!(decimal(42), b"42");
        assert_eq!(name_of("X-RateLimit-Reset"), "X-RateLimit-Reset");
        assert!(headers().is_empty());
        assert!(script(64).is_empty());
    }
}
