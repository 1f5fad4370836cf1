//! Where things are in a fleet traffic file's text, and errors that say so: the line, the field
//! and what is wrong.

use toml::Spanned;

/// An error at a line (if known) in a field, saying what is wrong.
pub(super) type Bad = (Option<usize>, String, String);

/// Where things are in the file's text.
pub(super) struct Text<'a>(pub(super) &'a str);

impl Text<'_> {
    /// The 1-based line of `span`'s start.
    pub(super) fn line(&self, span: std::ops::Range<usize>) -> Option<usize> {
        Some(self.0[..span.start.min(self.0.len())].matches('\n').count() + 1)
    }

    pub(super) fn bad<T>(&self, value: &Spanned<T>, field: String, what: String) -> Bad {
        (self.line(value.span()), field, what)
    }
}

/// Checks that `value` lies in `range`, or says what it expected.
pub(super) fn within<T: PartialOrd + std::fmt::Display>(
    text: &Text<'_>,
    value: &Spanned<T>,
    field: &str,
    range: std::ops::RangeInclusive<T>,
) -> Result<(), Bad> {
    if range.contains(value.get_ref()) {
        Ok(())
    } else {
        Err(text.bad(
            value,
            field.to_owned(),
            format!(
                "{}: expected {} to {}",
                value.get_ref(),
                range.start(),
                range.end()
            ),
        ))
    }
}
