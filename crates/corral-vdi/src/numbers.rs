//! Whole-number flags read as numbers first, so that a bad one says so in the flag's own terms
//! ("-1 is not a number of members: write a whole number (1 to 500)") instead of the argument
//! parser's `0..=4294967295`, or its tip to write `-- -1` (it takes `-1` for a flag). Whether a
//! number is in range is the core's to say, with the rest of the input (`pool::validate_create`,
//! the policy's bounds): one rule, one home.

use vdi_core::pool::MAX_POOL_SIZE;

/// A pool's size (the core allows 1 to [`MAX_POOL_SIZE`]).
///
/// Errors: a sentence naming the text and what to write.
pub fn pool_size(text: &str) -> Result<u32, String> {
    count(
        text,
        "a number of members",
        &format!("1 to {MAX_POOL_SIZE}"),
    )
}

/// A number of warm members (the core allows 0 to the pool's size).
///
/// Errors: a sentence naming the text and what to write.
pub fn warm(text: &str) -> Result<u32, String> {
    count(text, "a number of warm members", "0 to the size")
}

fn count(text: &str, what: &str, range: &str) -> Result<u32, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return trimmed
            .parse::<u32>()
            .map_err(|_| format!("{trimmed} is out of range ({range})"));
    }
    Err(format!(
        "\"{text}\" is not {what}: write a whole number ({range})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_numbers_first_and_the_core_judges_the_range() {
        assert_eq!(pool_size("3"), Ok(3));
        // In range or not is the core's to say, with its own sentence.
        assert_eq!(pool_size("0"), Ok(0));
        assert_eq!(
            pool_size("-1"),
            Err("\"-1\" is not a number of members: write a whole number (1 to 500)".into())
        );
        assert_eq!(
            pool_size("99999999999"),
            Err("99999999999 is out of range (1 to 500)".into())
        );
        assert!(
            pool_size("two")
                .unwrap_err()
                .contains("write a whole number")
        );
        assert_eq!(warm("0"), Ok(0));
        assert_eq!(
            warm("-2"),
            Err(
                "\"-2\" is not a number of warm members: write a whole number (0 to the size)"
                    .into()
            )
        );
        assert!(warm("1.5").is_err() && warm("").is_err());
    }
}
