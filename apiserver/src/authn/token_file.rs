//! The static token file (`--token-auth-file`): CSV records `token,user,uid[,"group1,group2"]`.
//!
//! Follows upstream's reading rules: standard CSV (RFC 4180 quoting, `""` escapes a quote,
//! quoted fields may span lines), empty lines are skipped, there is no comment syntax, every
//! record needs at least three columns, columns after the fourth are ignored, records with an
//! empty token are skipped, and a later duplicate token replaces an earlier one.

use std::collections::HashMap;
use std::path::Path;

use super::{AuthnError, UserInfo};

/// Tokens mapped to the users they authenticate.
#[derive(Clone, Debug, Default)]
pub struct TokenFile {
    tokens: HashMap<String, UserInfo>,
}

impl TokenFile {
    /// Read and parse the token file at `path`.
    pub fn load(path: &Path) -> Result<Self, AuthnError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthnError::TokenFileIo {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|e| match e {
            AuthnError::TokenFileSyntax { line, message, .. } => AuthnError::TokenFileSyntax {
                path: Some(path.to_owned()),
                line,
                message,
            },
            other => other,
        })
    }

    /// Parse token file text.
    pub fn parse(text: &str) -> Result<Self, AuthnError> {
        let mut tokens = HashMap::new();
        for record in parse_csv(text)? {
            if record.fields.len() < 3 {
                return Err(syntax(
                    record.line,
                    format!(
                        "need at least 3 columns (token, user name, user uid), found {}",
                        record.fields.len()
                    ),
                ));
            }
            let mut fields = record.fields.into_iter();
            let token = fields.next().unwrap_or_default();
            let name = fields.next().unwrap_or_default();
            let uid = fields.next().unwrap_or_default();
            if token.is_empty() {
                tracing::warn!(
                    line = record.line,
                    "token file: skipping record with empty token"
                );
                continue;
            }
            let groups = fields
                .next()
                .map(|g| {
                    g.split(',')
                        .filter(|g| !g.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            if tokens.contains_key(&token) {
                tracing::warn!(
                    line = record.line,
                    "token file: duplicate token, last one wins"
                );
            }
            tokens.insert(
                token,
                UserInfo {
                    name,
                    uid,
                    groups,
                    ..UserInfo::default()
                },
            );
        }
        Ok(Self { tokens })
    }

    /// The user a token belongs to.
    pub fn lookup(&self, token: &str) -> Option<&UserInfo> {
        self.tokens.get(token)
    }

    /// Number of distinct tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the file held no tokens.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

fn syntax(line: usize, message: String) -> AuthnError {
    AuthnError::TokenFileSyntax {
        path: None,
        line,
        message,
    }
}

/// One CSV record and the (1-based) line it starts on.
#[derive(Debug, PartialEq)]
struct Record {
    line: usize,
    fields: Vec<String>,
}

/// A strict CSV reader with Go `encoding/csv` defaults: `,` separator, `"` quoting, CRLF or LF
/// line ends, empty lines skipped, bare `"` inside an unquoted field rejected.
fn parse_csv(text: &str) -> Result<Vec<Record>, AuthnError> {
    let mut records = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    loop {
        // Skip empty lines.
        loop {
            match chars.peek() {
                Some('\n') => {
                    chars.next();
                    line += 1;
                }
                Some('\r') => {
                    chars.next();
                }
                _ => break,
            }
        }
        if chars.peek().is_none() {
            return Ok(records);
        }
        let start = line;
        let mut fields = Vec::new();
        loop {
            let mut field = String::new();
            if chars.peek() == Some(&'"') {
                chars.next();
                loop {
                    match chars.next() {
                        None => return Err(syntax(start, "quoted field is not terminated".into())),
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            field.push('"');
                        }
                        Some('"') => break,
                        Some(c) => {
                            if c == '\n' {
                                line += 1;
                            }
                            field.push(c);
                        }
                    }
                }
                match chars.peek() {
                    None | Some(',' | '\n' | '\r') => {}
                    Some(c) => {
                        let message = format!("unexpected {c:?} after a closing quote");
                        return Err(syntax(line, message));
                    }
                }
            } else {
                while let Some(&c) = chars.peek() {
                    match c {
                        ',' | '\n' => break,
                        '\r' if matches!(chars.clone().nth(1), None | Some('\n')) => break,
                        '"' => {
                            let message = "bare \" in an unquoted field (quote the field)".into();
                            return Err(syntax(line, message));
                        }
                        c => {
                            field.push(c);
                            chars.next();
                        }
                    }
                }
            }
            fields.push(field);
            match chars.next() {
                Some(',') => continue,
                Some('\r') => {
                    if chars.peek() == Some(&'\n') {
                        chars.next();
                    }
                    line += 1;
                    break;
                }
                Some('\n') => {
                    line += 1;
                    break;
                }
                _ => break,
            }
        }
        records.push(Record {
            line: start,
            fields,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, uid: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            uid: uid.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..UserInfo::default()
        }
    }

    #[test]
    fn basic_records() {
        let text = "tok1,alice,1001\n\ntok2,bob,1002,\"dev,ops\"\r\ntok3,carol,1003,solo,extra\n";
        let tf = TokenFile::parse(text).unwrap();
        assert_eq!(tf.len(), 3);
        assert_eq!(tf.lookup("tok1"), Some(&user("alice", "1001", &[])));
        assert_eq!(
            tf.lookup("tok2"),
            Some(&user("bob", "1002", &["dev", "ops"]))
        );
        assert_eq!(tf.lookup("tok3"), Some(&user("carol", "1003", &["solo"])));
        assert_eq!(tf.lookup("tok4"), None);
        assert_eq!(tf.lookup(""), None);
    }

    #[test]
    fn quoting_rules() {
        let text = "\"to,k\",\"a \"\"quoted\"\" name\",7,\"g1,\ng2\"\nlast,x,9";
        let tf = TokenFile::parse(text).unwrap();
        assert_eq!(
            tf.lookup("to,k"),
            Some(&user("a \"quoted\" name", "7", &["g1", "\ng2"]))
        );
        assert_eq!(tf.lookup("last"), Some(&user("x", "9", &[])));
    }

    #[test]
    fn empty_token_skipped_and_duplicates_replace() {
        let text = ",nobody,0\ntok,first,1\ntok,second,2\n";
        let tf = TokenFile::parse(text).unwrap();
        assert_eq!(tf.len(), 1);
        assert_eq!(tf.lookup("tok").unwrap().name, "second");
    }

    #[test]
    fn empty_file() {
        assert!(TokenFile::parse("").unwrap().is_empty());
        assert!(TokenFile::parse("\n\r\n\n").unwrap().is_empty());
    }

    #[test]
    fn malformed_lines_report_line_numbers() {
        let err = |text: &str| TokenFile::parse(text).unwrap_err().to_string();
        let e = err("tok,alice,1\n\ntok2,bob\n");
        assert!(e.contains("line 3") && e.contains("found 2"), "{e}");
        // No comment syntax upstream: a comment line is a one-column record.
        let e = err("# tokens\ntok,alice,1\n");
        assert!(e.contains("line 1") && e.contains("found 1"), "{e}");
        let e = err("tok,alice,1\ntok2,\"bob,2\n");
        assert!(e.contains("line 2") && e.contains("not terminated"), "{e}");
        let e = err("tok,al\"ice,1\n");
        assert!(e.contains("line 1") && e.contains("bare"), "{e}");
        let e = err("tok,\"alice\"x,1\n");
        assert!(e.contains("after a closing quote"), "{e}");
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(&path, "tok,alice,1,\"a,b\"\nbad\n").unwrap();
        let e = TokenFile::load(&path).unwrap_err().to_string();
        assert!(e.contains("tokens.csv") && e.contains("line 2"), "{e}");
        std::fs::write(&path, "tok,alice,1,\"a,b\"\n").unwrap();
        let tf = TokenFile::load(&path).unwrap();
        assert_eq!(tf.lookup("tok"), Some(&user("alice", "1", &["a", "b"])));
        let missing = TokenFile::load(&dir.path().join("nope")).unwrap_err();
        assert!(matches!(missing, AuthnError::TokenFileIo { .. }));
    }
}
