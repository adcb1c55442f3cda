//! Unsigned integers as decimal ASCII, without allocating: the one writer of digits for every
//! place that puts a number into bytes (HTTP status lines and lengths, SSE ids and retries,
//! JSON-RPC codes and ids, the durable store's RESP and JSON).

/// The two digits of 00 to 99, in order: `decimal` writes two digits per division.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243444546474849\
5051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";

/// `n` in decimal, in `out`'s tail.
pub(crate) fn decimal(mut n: u64, out: &mut [u8; 20]) -> &[u8] {
    let mut at = out.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        out[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        at -= 2;
        out[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        out[at] = b'0' + n as u8;
    }
    &out[at..]
}

/// Appends `n` in decimal to `out`.
pub(crate) fn push_decimal(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(decimal(n, &mut [0; 20]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_writes_every_number_as_display_does() {
        // Goal: the two-digits-at-a-time path agrees with `Display` at every digit count and
        // at each boundary where a digit is added or a pair is split.
        let mut checked = 0;
        for n in (0..100_000u64).chain((1..=19).flat_map(|e| {
            let p = 10u64.pow(e);
            [p - 1, p, p + 1, p.saturating_mul(3).saturating_add(7)]
        })) {
            assert_eq!(decimal(n, &mut [0; 20]), n.to_string().as_bytes(), "{n}");
            checked += 1;
        }
        assert_eq!(decimal(u64::MAX, &mut [0; 20]), u64::MAX.to_string().as_bytes());
        assert_eq!(checked, 100_000 + 19 * 4);
    }
}
