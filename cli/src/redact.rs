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
///
/// User-info is found by where an `@` is, not by how a URL parser splits
/// the text: a password with an unencoded `/`, `?` or `#`
/// (`http://u:pa/ss@host/`) makes a parser end the authority inside the
/// password, so the password would be shown as a host, a path or a query.
/// The rule, over-redacting rather than leaking:
///
/// * No `@` after `scheme://`: no user-info; the text is shown with its
///   query values and fragment hidden.
/// * Every `@` begins a path segment (`/@types/node`, `/@user`) after an
///   authority that is a plain host — a name with a dot, `localhost` or an
///   IP literal, with an optional numeric port: a credential-free URL,
///   shown as above. (Only user-info that itself looks like such a host,
///   up to a `/` right before the `@`, could slip through this; nobody's
///   password is `example.com:8080/`.)
/// * Otherwise any `@` may end user-info: everything from `scheme://` to
///   the last `@` is hidden, and the rest is shown as a URL's host, path
///   and query. If a `?` or `#` comes before that `@`, the rest may be in
///   a query or fragment (`?mail=a@b&token=...`) or the `?`/`#` may be in
///   a password: nothing after `scheme://` is shown.
fn url(input: &str) -> String {
    let (scheme, rest) = split_scheme(input);
    let Some(last_at) = rest.rfind('@') else {
        return format!("{scheme}{}", without_secrets(rest));
    };
    if at_only_in_path(rest) {
        return format!("{scheme}{}", without_secrets(rest));
    }
    let (hidden, after) = (&rest[..last_at], &rest[last_at + 1..]);
    if hidden.contains(['?', '#']) {
        return format!("{scheme}{HIDDEN}");
    }
    format!("{scheme}{HIDDEN}@{}", without_secrets(after))
}

/// `scheme://` (kept) and the rest; no scheme unless it is one (letters,
/// digits, `+ - .`, starting with a letter), so `u:pw@h/?r=http://x` has
/// none.
fn split_scheme(input: &str) -> (&str, &str) {
    match input.find("://") {
        Some(i)
            if input[..i].starts_with(|c: char| c.is_ascii_alphabetic())
                && input[..i]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
        {
            input.split_at(i + 3)
        }
        _ => ("", input),
    }
}

/// Whether every `@` of `rest` (a URL after `scheme://`) begins a path
/// segment after an authority that is a plain host (see [`url`]).
fn at_only_in_path(rest: &str) -> bool {
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let path_end = rest.find(['?', '#']).unwrap_or(rest.len());
    plain_host(&rest[..authority_end])
        && rest
            .match_indices('@')
            .all(|(i, _)| i > authority_end && i < path_end && rest.as_bytes()[i - 1] == b'/')
}

/// `host[:port]` where the host is a name with a dot, `localhost`, or an
/// IP literal (`[...]`), and the port digits.
fn plain_host(authority: &str) -> bool {
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((ip, port)) => {
                if ip.is_empty()
                    || !ip
                        .chars()
                        .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
                {
                    return false;
                }
                (None, port)
            }
            None => return false,
        },
        None => match authority.split_once(':') {
            Some((host, _)) => (Some(host), &authority[host.len()..]),
            None => (Some(authority), ""),
        },
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|p| {
            !p.is_empty() && p.len() <= 5 && p.chars().all(|c| c.is_ascii_digit())
        });
    let host_ok = host.is_none_or(|h| {
        !h.is_empty()
            && h.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
            && (h.contains('.') || h.eq_ignore_ascii_case("localhost"))
    });
    port_ok && host_ok
}

/// Whether `input` looks like a URL whose user-info has a `/`, `?` or `#`
/// that is not percent-encoded: an `@` after the first of them (where a
/// parser ends the authority). A malformed URL like that is explained by
/// this, not by what the parser made of it ("the port is not a number").
pub(crate) fn unencoded_user_info(input: &str) -> bool {
    let (_, rest) = split_scheme(input);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    rest[authority_end..].contains('@')
}

/// `rest` (a URL after `scheme://`, with no user-info) with its query
/// values and fragment hidden.
fn without_secrets(rest: &str) -> String {
    let (before_fragment, fragment) = match rest.split_once('#') {
        Some((b, _)) => (b, Some(HIDDEN)),
        None => (rest, None),
    };
    let (before_query, query) = match before_fragment.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (before_fragment, None),
    };
    let mut out = String::with_capacity(rest.len());
    out.push_str(before_query);
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
        // An `@` that could end user-info hides all before it (see `url`).
        assert_eq!(echo(Input::Url, "http://h.test/a@b"), "`http://***@b`");
    }

    /// What of a URL is shown, shape by shape: no part of what could be a
    /// password, whether or not the URL is valid, and credential-free URLs
    /// (an `@` in the path included) readable.
    #[test]
    fn no_part_of_a_password_is_shown_whatever_its_characters() {
        let cases = [
            // Passwords with unencoded / ? # @ (the trial's shapes).
            (
                "http://user:pa/ssSECRET@127.0.0.1:8/echo",
                "http://***@127.0.0.1:8/echo",
            ),
            ("http://user:p?ssSECRET@127.0.0.1:8/echo", "http://***"),
            ("http://user:se#cretSECRET@127.0.0.1:8/echo", "http://***"),
            (
                "http://user:p@ssSECRET@127.0.0.1:8/echo",
                "http://***@127.0.0.1:8/echo",
            ),
            (
                "http://user:p/@ssSECRET@h.test/echo",
                "http://***@h.test/echo",
            ),
            ("http://user:p/?#@SECRET@h.test/e?k=v", "http://***"),
            ("http://1234/SECRET@h.test/x", "http://***@h.test/x"),
            ("http://user:1234/SECRET@h.test/x", "http://***@h.test/x"),
            (
                "http://user:99/SECRET@h.test/@types/node",
                "http://***@types/node",
            ),
            (
                "https://TOKEN/SECRET+x=@github.com/o/r",
                "https://***@github.com/o/r",
            ),
            (
                "http://user:pw/SECRET@exa mple/a?token=SECRETQ",
                "http://***@exa mple/a?token=***",
            ),
            ("http://:SECRET/x@h.test/", "http://***@h.test/"),
            ("http://user:SECRET@", "http://***@"),
            ("http://user:SE/CRET@", "http://***@"),
            ("HTTP://user:pa/ssSECRET@h.test/", "HTTP://***@h.test/"),
            // No scheme, or no valid one: the whole text is the URL.
            ("user:pa/ssSECRET@h.test/x", "***@h.test/x"),
            ("u:SECRET@h/?r=http://x", "***@h/?r=***"),
            ("1http://user:SECRET@h/", "***@h/"),
            // Valid URLs with user-info: hidden, as always.
            ("http://alice:SECRET@h.test:8/a", "http://***@h.test:8/a"),
            (
                "http://alice:SECRET@h.test/@types/node",
                "http://***@types/node",
            ),
            (
                "http://alice:SECRET@h.test/x?mail=a@b.c&token=SECRETQ",
                "http://***",
            ),
            // An `@` in a query or fragment may follow a password's `?`.
            ("http://h.test/x?mail=a@b.c&token=SECRETQ", "http://***"),
            ("http://h.test/x#a@SECRET", "http://***"),
            ("http://h.test/users/SECRET@b.test", "http://***@b.test"),
            // Credential-free URLs with an `@` starting a path segment.
            (
                "https://registry.npmjs.org/@types/node",
                "https://registry.npmjs.org/@types/node",
            ),
            (
                "https://medium.com/@user/post?x=SECRETQ",
                "https://medium.com/@user/post?x=***",
            ),
            (
                "http://localhost:4873/@scope/pkg",
                "http://localhost:4873/@scope/pkg",
            ),
            (
                "http://127.0.0.1:8/@a/@b#SECRET",
                "http://127.0.0.1:8/@a/@b#***",
            ),
            ("http://[::1]:8/@a", "http://[::1]:8/@a"),
            // ... but not after an authority that could be user-info.
            ("http://SECRET/@h.test/", "http://***@h.test/"),
            ("http://user:12/@h.test/", "http://***@h.test/"),
            ("http://a_b.test/@x", "http://***@x"),
            ("http://[zz]/@x", "http://***@x"),
            // No `@`: shown, query values and fragment hidden.
            (
                "http://h.test:8/a/b?token=SECRET&x=1#SECRET",
                "http://h.test:8/a/b?token=***&x=***#***",
            ),
            ("http://user:pa/ss", "http://user:pa/ss"),
        ];
        for (input, shown) in cases {
            assert_eq!(url(input), shown, "{input}");
        }
        for (input, _) in cases {
            let shown = url(input);
            assert!(!shown.contains("SECRET"), "{input} -> {shown}");
            for text in [
                echo(Input::Url, input),
                echo(Input::Arg, input),
                plain(input),
            ] {
                assert!(!text.contains("SECRET"), "{input} -> {text}");
            }
        }
        assert!(unencoded_user_info("http://user:pa/ss@h/"));
        assert!(unencoded_user_info("http://user:p?ss@h/"));
        assert!(unencoded_user_info("http://user:p#ss@h/"));
        assert!(!unencoded_user_info("http://user:pass@h/"));
        assert!(!unencoded_user_info("http://127.0.0.1:99999/x"));
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
