//! Resource quantities (`100m`, `1.5`, `64Mi`, `1e3`) as integers, rounded up as upstream's
//! `Quantity.MilliValue()` and `Quantity.Value()` do. The apiserver validates quantities on
//! write, so an unparsable one here counts as zero.

/// A quantity in thousandths, rounded up (`100m` → 100, `1` → 1000, `1.5` → 1500).
pub fn milli_value(text: &str) -> i64 {
    scaled(text, 1000.0)
}

/// A quantity in whole units, rounded up (`1Ki` → 1024, `1k` → 1000, `500m` → 1).
pub fn value(text: &str) -> i64 {
    scaled(text, 1.0)
}

fn scaled(text: &str, scale: f64) -> i64 {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let Ok(number) = number.parse::<f64>() else {
        return 0;
    };
    let multiplier = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent if exponent.starts_with(['e', 'E']) => match exponent[1..].parse::<i32>() {
            Ok(power) => 10f64.powi(power),
            Err(_) => return 0,
        },
        _ => return 0,
    };
    let amount = number * multiplier * scale;
    // Round up as upstream's MilliValue/Value do, forgiving float noise (0.1*1000 = 100.00000000000001).
    let rounded = amount.round();
    if (amount - rounded).abs() < 1e-6 {
        rounded as i64
    } else {
        amount.ceil() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_up_like_upstream() {
        assert_eq!(milli_value("100m"), 100);
        assert_eq!(milli_value("1"), 1000);
        assert_eq!(milli_value("1.5"), 1500);
        assert_eq!(milli_value("0.1"), 100);
        assert_eq!(value("1Ki"), 1024);
        assert_eq!(value("1k"), 1000);
        assert_eq!(value("500m"), 1);
        assert_eq!(value("64Mi"), 64 << 20);
        assert_eq!(value("1e3"), 1000);
        assert_eq!(value("junk"), 0);
    }
}
