//! The one place where user input is echoed: every usage error that quotes
//! what the user typed goes through [`echo`].
//!
//! * Secrets never reach stderr: user-info in URLs (`alice:pw@`), every
//!   query value and the fragment, and every header value (not only
//!   `Authorization`, `Proxy-Authorization` and `Cookie`: an API key travels
//!   in any header) are replaced by `***`.
//! * Control characters (CR, LF, ESC, ...) are escaped (`\n`, `\r`,
//!   `\u{1b}`), so one error is one line and nobody can forge log lines.

use std::fmt::Write;

/// What an echoed input is, which decides what of it is secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// A URL (or what was meant to be one): user-info, query values and
    /// fragment hidden.
    Url,
    /// A `Name: value` header: the value hidden, the name shown.
    Header,
    /// A secret as a whole (an idempotency key, a header value): hidden.
    Secret,
    /// A command-line argument: `--flag=value` hides the value, anything
    /// else is treated as a URL (it may be one).
    Arg,
    /// Plain text (a method, a file name, a state name, a flag value):
    /// URLs inside it are redacted, control characters escaped.
    Text,
}

/// The hidden part.
const HIDDEN: &str = "***";

/// `input` as it may be echoed in an error message: secrets hidden,
/// control characters escaped, wrapped in backticks.
pub(crate) fn echo(what: Input, input: &str) -> String {
    format!("`{}`", escape(&redact(what, input), true))
}

/// A message that may quote input (e.g. a library's error text), as it may
/// be printed: URLs in it redacted, control characters escaped, no
/// backticks added.
pub(crate) fn plain(message: &str) -> String {
    escape(&redact(Input::Text, message), false)
}

/// A URL as it may be printed in output (secrets hidden, control
/// characters escaped, no backticks).
pub(crate) fn url_plain(input: &str) -> String {
    escape(&url(input), false)
}

fn redact(what: Input, input: &str) -> String {
    match what {
        Input::Url => url(input),
        Input::Header => match input.split_once(':') {
            Some((name, value)) if !value.trim().is_empty() => format!("{name}: {HIDDEN}"),
            Some((name, _)) => format!("{name}:"),
            // No colon: the first word may be the name; the rest may be
            // the value.
            None => match input.trim().split_once(char::is_whitespace) {
                Some((first, _)) => format!("{first} {HIDDEN}"),
                None => HIDDEN.to_owned(),
            },
        },
        Input::Secret => HIDDEN.to_owned(),
        Input::Arg => match input.split_once('=') {
            Some((flag, _)) if flag.starts_with('-') => format!("{flag}={HIDDEN}"),
            _ if input.starts_with('-') => input.to_owned(),
            _ => url(input),
        },
        Input::Text => input
            .split(' ')
            .map(|word| {
                if word.contains("://") || word.contains('?') || word.contains('@') {
                    url(word)
                } else {
                    word.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// A URL with user-info, query values and fragment hidden. Works on any
/// text (a malformed URL is redacted as well as a good one).
fn url(input: &str) -> String {
    let (before_fragment, fragment) = match input.split_once('#') {
        Some((b, _)) => (b, Some(HIDDEN)),
        None => (input, None),
    };
    let (before_query, query) = match before_fragment.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (before_fragment, None),
    };
    let authority_start = before_query.find("://").map_or(0, |i| i + 3);
    let authority_end = before_query[authority_start..]
        .find('/')
        .map_or(before_query.len(), |i| authority_start + i);
    let authority = &before_query[authority_start..authority_end];
    let mut out = String::with_capacity(input.len());
    out.push_str(&before_query[..authority_start]);
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(HIDDEN);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    out.push_str(&before_query[authority_end..]);
    if let Some(q) = query {
        out.push('?');
        let pairs: Vec<String> = q
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) => format!("{k}={HIDDEN}"),
                None if pair.is_empty() => String::new(),
                None => HIDDEN.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

/// Control characters (and, for an echo, the backticks that delimit it)
/// escaped.
fn escape(s: &str, backticks: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '`' if backticks => out.push_str("\\`"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_user_info_query_values_and_fragment() {
        assert_eq!(
            echo(
                Input::Url,
                "http://alice:hunter2pw@h.test:8/a/b?token=SECRET456&x=1#frag"
            ),
            "`http://***@h.test:8/a/b?token=***&x=***#***`"
        );
        assert_eq!(
            echo(Input::Url, "http://h.test/?SECRET"),
            "`http://h.test/?***`"
        );
        assert_eq!(echo(Input::Url, "alice:pw@h.test/x"), "`***@h.test/x`");
        assert_eq!(echo(Input::Url, "not a url"), "`not a url`");
        assert_eq!(echo(Input::Url, "http://h.test/a@b"), "`http://h.test/a@b`");
    }

    #[test]
    fn header_values_are_hidden_names_shown() {
        assert_eq!(
            echo(Input::Header, "Authorization: Bearer SECRET"),
            "`Authorization: ***`"
        );
        assert_eq!(echo(Input::Header, "X-Api-Key:SECRET"), "`X-Api-Key: ***`");
        assert_eq!(echo(Input::Header, "X-Api-Key SECRET"), "`X-Api-Key ***`");
        assert_eq!(echo(Input::Header, "SECRET"), "`***`");
        assert_eq!(echo(Input::Secret, "k1"), "`***`");
    }

    #[test]
    fn control_characters_are_escaped_so_an_echo_is_one_line() {
        let e = echo(Input::Text, "a\r\nb\x1b[31m\tc`d");
        assert_eq!(e, "`a\\r\\nb\\u{1b}[31m\\tc\\`d`");
        assert!(!e.contains('\n') && !e.contains('\r'));
        assert_eq!(plain("`x`: bad\nline"), "`x`: bad\\nline");
        let e = echo(Input::Header, "X-Bad\nName: v");
        assert_eq!(e, "`X-Bad\\nName: ***`");
    }

    #[test]
    fn arguments_and_text_hide_what_may_be_secret() {
        assert_eq!(echo(Input::Arg, "--token=SECRET"), "`--token=***`");
        assert_eq!(echo(Input::Arg, "--frob"), "`--frob`");
        assert_eq!(
            echo(Input::Arg, "http://u:p@h/?k=v"),
            "`http://***@h/?k=***`"
        );
        assert_eq!(
            echo(Input::Text, "see http://u:p@h/?k=v now"),
            "`see http://***@h/?k=*** now`"
        );
    }
}
