//! Text from the cluster made safe for a terminal. Names, holders, annotations and messages are
//! written by whoever may write objects, so a holder can carry escape sequences (a new window
//! title, a cleared screen, colours, a cursor sent elsewhere), bidirectional overrides that
//! reorder what is shown, or a line break that fakes a row; and a cell can be longer than
//! formatting can pad (Rust's format width stops at 65,535). Everything the CLI prints passes
//! through here, and here it is written: [`write_out`] (the `out!` macro), [`print_table`],
//! [`ask_yes`].

use std::borrow::Cow;

/// The most characters a table cell shows; longer values end in "…" with how many were left
/// out.
pub(crate) const CELL_MAX: usize = 200;

/// Whether `c` changes how a terminal shows text instead of being shown: C0 and C1 control
/// characters and DEL, and the Unicode bidirectional controls (marks, embeddings, overrides,
/// isolates).
pub(crate) fn is_control(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every control character written as an escape (`\u{1b}`), except line breaks
/// and tabs when `keep_lines` (the CLI's own multi-line output).
pub(crate) fn escaped(text: &str, keep_lines: bool) -> Cow<'_, str> {
    let kept = |c: char| keep_lines && matches!(c, '\n' | '\t');
    if !text.chars().any(|c| is_control(c) && !kept(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_control(c) && !kept(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A table cell: escaped, line breaks included, and at most [`CELL_MAX`] characters.
pub(crate) fn cell(text: &str) -> String {
    let text = escaped(text, false);
    let count = text.chars().count();
    if count <= CELL_MAX {
        return text.into_owned();
    }
    let kept: String = text.chars().take(CELL_MAX).collect();
    format!("{kept}… ({} more characters)", count - CELL_MAX)
}

/// Writes `text` to stdout. A reader that closed the pipe (`| head`) chose to stop reading: the
/// CLI then exits with 0 and says nothing, where `println!` would panic. Any other write failure
/// (a full disk) ends it with 1 and the reason on stderr.
pub(crate) fn write_out(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let text = text.to_string();
    if let Err(e) = std::io::stdout()
        .lock()
        .write_all(escaped(&text, true).as_bytes())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("corral-vdi: cannot write the output: {e}");
        std::process::exit(1);
    }
}

/// Asks `question` on stderr and reads the answer from stdin: true for y or yes (any case);
/// false for anything else, end of input included (a script that passes no answer changes
/// nothing).
pub(crate) fn ask_yes(question: &str) -> bool {
    use std::io::{BufRead, Write};
    eprint!("{}", escaped(question, true));
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_lowercase().as_str(), "y" | "yes")
}

/// Prints `rows` (the header first) as columns as wide as their widest cell, two spaces
/// apart, each line after `indent`.
pub(crate) fn print_table<const N: usize>(rows: &[[String; N]], indent: &str) {
    // Escaped and cut first: a cell from the cluster may hold anything (cell).
    let rows: Vec<[String; N]> = rows
        .iter()
        .map(|row| row.each_ref().map(|c| cell(c)))
        .collect();
    let widths: Vec<usize> = (0..N)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out!("{indent}{}", line.join("  ").trim_end());
    }
}

/// `json` with every character a terminal would act on written as a JSON escape (`\u202e`):
/// serde_json leaves DEL, C1 controls and bidirectional controls as they are, and they only
/// occur inside strings.
pub(crate) fn json_safe(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if is_control(c) && !matches!(c, '\n' | '\t') {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// `rows` as CSV (RFC 4180, one record a line, `\n` ends each): every cell escaped for a
/// terminal first (a line break in a message becomes `\u{a}`), then quoted by the CSV rules.
pub(crate) fn csv<const N: usize>(rows: &[[String; N]]) -> String {
    let mut writer = ::csv::WriterBuilder::new()
        .terminator(::csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    for row in rows {
        // Writing to memory cannot fail.
        let _ = writer.write_record(row.iter().map(|c| escaped(c, false).into_owned()));
    }
    writer
        .into_inner()
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_codes_overrides_and_breaks_and_keeps_the_rest() {
        let holder = "evil\u{1b}]0;pwned\u{7}\u{1b}[2J\u{202e}LTR\nfake row";
        assert_eq!(
            cell(holder),
            "evil\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{202e}LTR\\u{a}fake row"
        );
        assert_eq!(escaped("one\n\ttwo", true), "one\n\ttwo");
        assert!(matches!(
            escaped("alice@example.com", false),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_long_cell_is_cut_and_says_so() {
        let long = "2".repeat(70_000);
        let shown = cell(&long);
        assert_eq!(
            shown.chars().count(),
            CELL_MAX + "… (69800 more characters)".chars().count()
        );
        assert!(shown.ends_with("… (69800 more characters)"));
    }
}
