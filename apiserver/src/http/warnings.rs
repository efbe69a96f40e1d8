//! `Warning: 299 - "…"` response headers, deduplicated and capped as upstream caps them: up to
//! 4096 characters of warning text in all; past that every warning is cut to 256 characters,
//! and once even those fill the budget the rest are dropped. We also send at most 50 of them:
//! clients such as hyper refuse a response with more than 100 headers. A body with a hundred
//! thousand unknown fields therefore yields a few kilobytes of headers, not megabytes.

use std::collections::HashSet;

/// Characters of warning text sent before truncation starts.
const TOTAL_CHARS: usize = 4 * 1024;
/// Characters of one warning once truncating.
const ITEM_CHARS: usize = 256;
/// The most warnings one response carries.
const MAX_WARNINGS: usize = 50;

/// The texts to send as warnings, after deduplication and the caps.
pub fn capped(warnings: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    let unique: Vec<&str> = warnings
        .iter()
        .map(String::as_str)
        .filter(|text| !text.is_empty() && seen.insert(*text))
        .collect();
    let total: usize = unique.iter().map(|text| text.chars().count()).sum();
    if total <= TOTAL_CHARS {
        return unique
            .into_iter()
            .take(MAX_WARNINGS)
            .map(str::to_string)
            .collect();
    }
    let mut sent = Vec::new();
    let mut written = 0;
    for text in unique {
        if written >= TOTAL_CHARS || sent.len() >= MAX_WARNINGS {
            break;
        }
        let cut: String = text.chars().take(ITEM_CHARS).collect();
        written += cut.chars().count();
        sent.push(cut);
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_warnings_pass_whole_and_once() {
        let warnings = vec!["a".to_string(), "b".to_string(), "a".to_string()];
        assert_eq!(capped(&warnings), vec!["a", "b"]);
    }

    #[test]
    fn many_short_warnings_are_capped_in_number() {
        let warnings: Vec<String> = (0..1000).map(|i| format!("w{i}")).collect();
        assert_eq!(capped(&warnings).len(), MAX_WARNINGS);
    }

    #[test]
    fn many_warnings_are_cut_and_capped() {
        let warnings: Vec<String> = (0..100_000)
            .map(|i| format!("unknown field \"spec.f{i}\" {}", "x".repeat(300)))
            .collect();
        let sent = capped(&warnings);
        assert!(sent.iter().all(|text| text.chars().count() <= ITEM_CHARS));
        let total: usize = sent.iter().map(|text| text.chars().count()).sum();
        assert!(total < TOTAL_CHARS + ITEM_CHARS, "{total}");
        assert!(sent.len() < 20, "{}", sent.len());
    }
}
