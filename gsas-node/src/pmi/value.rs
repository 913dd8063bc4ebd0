//! How the client stores arbitrary bytes in the PMI key-value space.
//!
//! A value is hex-encoded and cut into chunks that each fit in one `put` line and in the
//! server's `vallen_max - 1` characters. The chunk under the user's key reads
//! `<count>:<hex>`; chunks 1..count are stored under `<key>#1`, `<key>#2`, ... as plain hex.
//! The count prefix makes every stored value self-describing, so a reader issues exactly
//! `count` gets and detects a missing or foreign chunk. `#` is therefore not allowed in
//! user keys.
//!
//! What it is not: I/O; the client calls these functions around its puts and gets.
//! Thread-safety: pure functions.

use super::PmiError;
use super::wire::{MAX_REQUEST_LINE, hex_decode, hex_encode, is_token};

/// Most chunks one value may use.
pub(crate) const MAX_CHUNKS: usize = 9999;
/// Room reserved in every key for the `#<n>` suffix.
const SUFFIX_RESERVE: usize = 5;
/// Room reserved in the first chunk for the `<count>:` prefix.
const HEAD_RESERVE: usize = 5;

/// Hex characters per chunk for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    first: usize,
    rest: usize,
}

impl Plan {
    /// The plan for `key` (user key, without suffix) in KVS `kvsname` on a server that
    /// advertises `vallen_max`; `None` when not even one byte fits.
    pub(crate) fn new(kvsname: &str, key: &str, vallen_max: usize) -> Option<Plan> {
        let room = |key_len: usize| {
            let overhead = "cmd=put kvsname=".len()
                + kvsname.len()
                + " key=".len()
                + key_len
                + " value=".len()
                + 1;
            MAX_REQUEST_LINE
                .saturating_sub(overhead)
                .min(vallen_max.saturating_sub(1))
        };
        let even = |n: usize| n & !1;
        let first = even(room(key.len()).saturating_sub(HEAD_RESERVE));
        let rest = even(room(key.len() + SUFFIX_RESERVE));
        (first >= 2 && rest >= 2).then_some(Plan { first, rest })
    }

    /// Largest value in bytes this plan can store.
    pub(crate) fn max_len(&self) -> usize {
        (self.first + (MAX_CHUNKS - 1) * self.rest) / 2
    }
}

/// Checks a user key: a token without `#`, not `PMI_`-prefixed, short enough for the
/// chunk suffix within `keylen_max - 1` characters.
pub(crate) fn check_key(key: &str, keylen_max: usize) -> Result<(), PmiError> {
    let bad = |reason: String| {
        Err(PmiError::InvalidKey {
            key: key.to_owned(),
            reason,
        })
    };
    if key.is_empty() {
        return bad("empty key".into());
    }
    if !is_token(key) || key.contains('#') {
        return bad("keys are printable ASCII without space, '=' or '#'".into());
    }
    if key.starts_with("PMI_") {
        return bad("the PMI_ prefix is reserved for the process manager".into());
    }
    let max = keylen_max.saturating_sub(1 + SUFFIX_RESERVE);
    if key.len() > max {
        return bad(format!(
            "longer than {max} characters (the server's keylen_max is {keylen_max})"
        ));
    }
    Ok(())
}

/// The key of chunk `i`.
pub(crate) fn chunk_key(key: &str, i: usize) -> String {
    if i == 0 {
        key.to_owned()
    } else {
        format!("{key}#{i}")
    }
}

/// Encodes `value` into the strings to store under `chunk_key(key, 0..)`.
pub(crate) fn encode(key: &str, value: &[u8], plan: Plan) -> Result<Vec<String>, PmiError> {
    if value.len() > plan.max_len() {
        return Err(PmiError::ValueTooLarge {
            key: key.to_owned(),
            len: value.len(),
            max: plan.max_len(),
        });
    }
    let hex = hex_encode(value);
    let (head, mut tail) = hex.split_at(hex.len().min(plan.first));
    let mut rest = Vec::new();
    while !tail.is_empty() {
        let (c, t) = tail.split_at(tail.len().min(plan.rest));
        rest.push(c);
        tail = t;
    }
    let mut out = Vec::with_capacity(1 + rest.len());
    out.push(format!("{}:{head}", 1 + rest.len()));
    out.extend(rest.into_iter().map(str::to_owned));
    Ok(out)
}

/// Reads the first chunk: the number of chunks and the bytes it holds.
pub(crate) fn decode_head(key: &str, stored: &str) -> Result<(usize, Vec<u8>), PmiError> {
    let corrupt = |reason: &str| PmiError::Corrupt {
        key: key.to_owned(),
        reason: format!("{reason} (stored {:?})", super::wire::excerpt(stored)),
    };
    let (count, hex) = stored
        .split_once(':')
        .ok_or_else(|| corrupt("no <count>: prefix; not written by a gsas client"))?;
    let count: usize = count
        .parse()
        .ok()
        .filter(|c| (1..=MAX_CHUNKS).contains(c))
        .ok_or_else(|| corrupt("bad chunk count"))?;
    let bytes = hex_decode(hex).ok_or_else(|| corrupt("not hex"))?;
    Ok((count, bytes))
}

/// Decodes chunk `i` (`i >= 1`) of `key`.
pub(crate) fn decode_chunk(key: &str, i: usize, stored: &str) -> Result<Vec<u8>, PmiError> {
    hex_decode(stored).ok_or_else(|| PmiError::Corrupt {
        key: key.to_owned(),
        reason: format!("chunk #{i} is not hex"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(key: &str, chunks: &[String]) -> Vec<u8> {
        let (count, mut out) = decode_head(key, &chunks[0]).unwrap();
        assert_eq!(count, chunks.len());
        for (i, c) in chunks.iter().enumerate().skip(1) {
            out.extend(decode_chunk(key, i, c).unwrap());
        }
        out
    }

    #[test]
    fn hydra_sized_plan_fits_lines() {
        let kvs = "kvs_8544_0_1334465207_vm";
        let key = "shmem-123-heap-base";
        let plan = Plan::new(kvs, key, 1024).unwrap();
        let value: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let chunks = encode(key, &value, plan).unwrap();
        assert!(chunks.len() > 5);
        for (i, c) in chunks.iter().enumerate() {
            let line = format!(
                "cmd=put kvsname={kvs} key={} value={c}\n",
                chunk_key(key, i)
            );
            assert!(
                line.len() <= MAX_REQUEST_LINE,
                "chunk {i}: {} bytes",
                line.len()
            );
            assert!(c.len() < 1024);
        }
        assert_eq!(decode_all(key, &chunks), value);
    }

    #[test]
    fn small_vallen_and_empty_values() {
        let plan = Plan::new("k", "a", 16).unwrap();
        for len in [0usize, 1, 4, 5, 6, 7, 100] {
            let v: Vec<u8> = (0..len as u8).collect();
            let chunks = encode("a", &v, plan).unwrap();
            assert!(chunks.iter().all(|c| c.len() <= 15), "{chunks:?}");
            assert_eq!(decode_all("a", &chunks), v);
        }
        assert_eq!(encode("a", &[], plan).unwrap(), vec!["1:".to_owned()]);
        assert!(Plan::new("k", "a", 7).is_none());
    }

    #[test]
    fn too_large_is_refused() {
        let plan = Plan::new("k", "a", 16).unwrap();
        let v = vec![0u8; plan.max_len() + 1];
        assert!(matches!(
            encode("a", &v, plan),
            Err(PmiError::ValueTooLarge { .. })
        ));
    }

    #[test]
    fn keys_are_checked() {
        assert!(check_key("shmem-0-addr", 64).is_ok());
        for bad in ["", "a b", "a=b", "a#1", "PMI_process_mapping", "é"] {
            assert!(check_key(bad, 64).is_err(), "{bad:?}");
        }
        assert!(check_key(&"k".repeat(58), 64).is_ok());
        assert!(check_key(&"k".repeat(59), 64).is_err());
    }

    #[test]
    fn foreign_values_are_reported() {
        assert!(decode_head("k", "deadbeef").is_err());
        assert!(decode_head("k", "0:").is_err());
        assert!(decode_head("k", "1:abc").is_err());
        assert!(decode_head("k", "x:ab").is_err());
        assert!(decode_chunk("k", 1, "unknown").is_err());
        assert_eq!(decode_head("k", "2:ff").unwrap(), (2, vec![0xff]));
    }
}
