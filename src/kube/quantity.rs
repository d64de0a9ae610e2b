//! Resource quantities exactly as the API server reads them
//! (`resource.ParseQuantity`, apimachinery's `quantity.go`): a JSON number
//! or a string, an optional sign, digits with an optional fraction, then a
//! binary suffix (`Ki` … `Ei`), a decimal one (`n u m k M G T P E`) or an
//! exponent (`e3`, `E-2`). Pure; the gateway's demand and the controller's
//! render read quantities through it, so what is counted is what a kubelet
//! would reserve.
//!
//! Values are kept exact (an integer mantissa scaled by powers of ten and
//! two) and read out rounded up, as `Quantity.MilliValue()` and `Value()`
//! do: `0.1m` of CPU reserves a whole millicore. Arithmetic is checked: a
//! quantity past what fits is an error naming it, never a wrap or a panic.

use serde_json::Value;

/// Why a quantity was refused, worded as the API server words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// `quantities must match the regular expression …` (decoding, 400).
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Format,
    /// Neither a string nor a number.
    #[error("a quantity is a string or a number, not {0}")]
    Type(&'static str),
    /// Parses, but is more than pinfleet counts in 64 bits.
    #[error("{0} is too large to count (at most {1})")]
    TooLarge(String, String),
}

/// A parsed quantity: `mantissa × 10^exp10 × 2^exp2`, negative when `negative`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    pub negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: i32,
}

/// At most this many significant digits are kept exactly (u128 holds 38).
const MAX_DIGITS: usize = 36;

impl Quantity {
    /// Reads a quantity from its JSON form: a string or a number (as the
    /// API server's decoder takes both).
    pub fn from_json(v: &Value) -> Result<Quantity, QuantityError> {
        match v {
            Value::String(s) => Quantity::parse(s),
            // serde_json prints a number the way Go's decoder reads it:
            // integers as digits, floats with an exponent where needed.
            Value::Number(n) => Quantity::parse(&n.to_string()),
            Value::Null => Err(QuantityError::Type("null")),
            Value::Bool(_) => Err(QuantityError::Type("a boolean")),
            Value::Array(_) => Err(QuantityError::Type("a list")),
            Value::Object(_) => Err(QuantityError::Type("an object")),
        }
    }

    /// `resource.ParseQuantity`.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        if s.is_empty() || s.len() > 128 {
            return Err(QuantityError::Format);
        }
        let bytes = s.as_bytes();
        let mut i = 0;
        let mut negative = false;
        if matches!(bytes[0], b'+' | b'-') {
            negative = bytes[0] == b'-';
            i = 1;
        }
        let mut digits = String::new();
        let mut fraction = 0i32;
        let mut seen_dot = false;
        let mut any_digit = false;
        while i < bytes.len() {
            match bytes[i] {
                b'0'..=b'9' => {
                    any_digit = true;
                    if digits.is_empty() && bytes[i] == b'0' {
                        // Leading zeros carry nothing (but still count as a digit).
                    } else {
                        digits.push(bytes[i] as char);
                    }
                    if seen_dot {
                        fraction += 1;
                    }
                }
                b'.' if !seen_dot => seen_dot = true,
                _ => break,
            }
            i += 1;
        }
        if !any_digit {
            return Err(QuantityError::Format);
        }
        // Trailing fraction zeros carry nothing either.
        while fraction > 0 && digits.ends_with('0') {
            digits.pop();
            fraction -= 1;
        }
        let suffix = &s[i..];
        let (exp10, exp2) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            e if e.len() > 1 && e.starts_with(['e', 'E']) => {
                let n = &e[1..];
                let body = n.strip_prefix(['+', '-']).unwrap_or(n);
                if body.is_empty() || body.len() > 4 || !body.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(QuantityError::Format);
                }
                (n.parse::<i32>().map_err(|_| QuantityError::Format)?, 0)
            }
            _ => return Err(QuantityError::Format),
        };
        if digits.len() > MAX_DIGITS {
            return Err(QuantityError::TooLarge(s.to_string(), format!("{MAX_DIGITS} significant digits")));
        }
        let mantissa: u128 = if digits.is_empty() { 0 } else { digits.parse().map_err(|_| QuantityError::Format)? };
        Ok(Quantity { negative: negative && mantissa != 0, mantissa, exp10: exp10 - fraction, exp2 })
    }

    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// `Quantity.MilliValue()`: thousandths, rounded up (for CPU).
    pub fn milli_ceil(&self) -> Option<u64> {
        self.scaled_ceil(3)
    }

    /// `Quantity.Value()`: units, rounded up (for memory, pods).
    pub fn value_ceil(&self) -> Option<u64> {
        self.scaled_ceil(0)
    }

    /// `|self| × 10^shift`, rounded up, if it fits in a u64.
    fn scaled_ceil(&self, shift: i32) -> Option<u64> {
        if self.mantissa == 0 {
            return Some(0);
        }
        let exp10 = self.exp10.checked_add(shift)?;
        let mut n = self.mantissa;
        // Powers of two first (only ever positive: binary suffixes).
        for _ in 0..self.exp2 {
            n = n.checked_mul(2)?;
        }
        let v = if exp10 >= 0 {
            if exp10 > 38 {
                return None;
            }
            n.checked_mul(10u128.checked_pow(exp10 as u32)?)?
        } else if -exp10 > 38 {
            // Smaller than one unit of the scale, and not zero: one.
            1
        } else {
            let d = 10u128.pow((-exp10) as u32);
            n.div_ceil(d)
        };
        u64::try_from(v).ok()
    }
}

/// CPU in millicores, rounded up, or why not.
pub fn cpu_millis(v: &Value) -> Result<u64, String> {
    count(v, true)
}

/// Bytes (or a plain count), rounded up, or why not.
pub fn bytes(v: &Value) -> Result<u64, String> {
    count(v, false)
}

fn count(v: &Value, milli: bool) -> Result<u64, String> {
    let q = Quantity::from_json(v).map_err(|e| e.to_string())?;
    if q.negative {
        return Err("must be greater than or equal to 0".into());
    }
    let n = if milli { q.milli_ceil() } else { q.value_ceil() };
    n.ok_or_else(|| {
        format!("{} is too large to count (at most {} {})", show(v), u64::MAX, if milli { "m" } else { "" })
            .trim_end()
            .to_string()
    })
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_read_as_the_api_server_reads_them() {
        let cases: &[(Value, Result<u64, ()>, Result<u64, ()>)] = &[
            // (quantity, millis, value)
            (json!("500m"), Ok(500), Ok(1)),
            (json!("2"), Ok(2000), Ok(2)),
            (json!(8), Ok(8000), Ok(8)),
            (json!(8589934592u64), Ok(8_589_934_592_000), Ok(8_589_934_592)),
            (json!(0.5), Ok(500), Ok(1)),
            (json!("0.1m"), Ok(1), Ok(1)),
            (json!("4e9"), Ok(4_000_000_000_000), Ok(4_000_000_000)),
            (json!("0.1k"), Ok(100_000), Ok(100)),
            (json!("1E"), Err(()), Ok(1_000_000_000_000_000_000)),
            (json!("1Ei"), Err(()), Ok(1 << 60)),
            (json!("1Gi"), Ok((1u64 << 30) * 1000), Ok(1 << 30)),
            (json!("1.5Gi"), Ok(1_610_612_736_000), Ok(1_610_612_736)),
            (json!("+3"), Ok(3000), Ok(3)),
            (json!("1e-3"), Ok(1), Ok(1)),
            (json!("100n"), Ok(1), Ok(1)),
            (json!("0"), Ok(0), Ok(0)),
            (json!("-0"), Ok(0), Ok(0)),
            (json!(".5"), Ok(500), Ok(1)),
            (json!("5."), Ok(5000), Ok(5)),
            (json!("18446744073709551615m"), Ok(u64::MAX), Ok(18_446_744_073_709_552)),
            (json!("18446744073709551616m"), Err(()), Ok(18_446_744_073_709_552)),
            (json!("10000000"), Ok(10_000_000_000), Ok(10_000_000)),
        ];
        for (q, milli, value) in cases {
            assert_eq!(cpu_millis(q).map_err(|_| ()), *milli, "{q} as millis");
            assert_eq!(bytes(q).map_err(|_| ()), *value, "{q} as a value");
        }
    }

    #[test]
    fn what_the_api_server_refuses_is_refused_with_its_words() {
        for q in [
            json!("lots"),
            json!(""),
            json!("1.2.3"),
            json!("1Ki2"),
            json!("1 "),
            json!("e3"),
            json!("1e"),
            json!("1ki"),
            json!("."),
            json!("1e99999"),
        ] {
            let e = cpu_millis(&q).unwrap_err();
            assert!(e.starts_with("quantities must match the regular expression"), "{q}: {e}");
        }
        assert_eq!(cpu_millis(&json!(true)).unwrap_err(), "a quantity is a string or a number, not a boolean");
        assert_eq!(cpu_millis(&json!("-1")).unwrap_err(), "must be greater than or equal to 0");
        assert!(cpu_millis(&json!("1e40")).unwrap_err().contains("too large to count"));
        assert!(bytes(&json!("99999999999999999999999999999999999999999")).unwrap_err().contains("too large to count"));
    }

    proptest::proptest! {
        /// A quantity written as digits and a suffix reads back as the
        /// arithmetic says, in every form (number, string, exponent).
        #[test]
        fn every_form_of_a_value_reads_alike(n in 0u64..1_000_000_000, k in 0u32..4) {
            let scaled = n * 10u64.pow(k);
            let forms = [json!(scaled), json!(scaled.to_string()), json!(format!("{n}e{k}")), json!(format!("{n}E+{k}"))];
            for f in &forms {
                proptest::prop_assert_eq!(bytes(f), Ok(scaled));
                proptest::prop_assert_eq!(cpu_millis(f), Ok(scaled * 1000));
            }
            proptest::prop_assert_eq!(cpu_millis(&json!(format!("{scaled}m"))), Ok(scaled));
        }
    }
}
