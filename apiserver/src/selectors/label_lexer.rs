//! The label selector lexer: upstream's tokens, with its quirks (a NUL byte reads as end of
//! input where a token would start; runs of operator characters are split greedily).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tok {
    Error,
    End,
    ClosePar,
    Comma,
    Bang,
    DoubleEquals,
    Equals,
    Greater,
    Ident,
    In,
    Less,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &[u8]) -> Option<Tok> {
    Some(match s {
        b")" => Tok::ClosePar,
        b"," => Tok::Comma,
        b"!" => Tok::Bang,
        b"==" => Tok::DoubleEquals,
        b"=" => Tok::Equals,
        b">" => Tok::Greater,
        b"in" => Tok::In,
        b"<" => Tok::Less,
        b"!=" => Tok::NotEquals,
        b"notin" => Tok::NotIn,
        b"(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Byte lexer with upstream's quirks (a NUL byte reads like the end of input).
pub(super) struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> Lexer<'a> {
    pub(super) fn new(s: &'a str) -> Self {
        Self {
            s: s.as_bytes(),
            pos: 0,
        }
    }

    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    pub(super) fn lex(&mut self) -> (Tok, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Tok::End, String::new());
        }
        self.unread();
        if is_special(ch) {
            self.scan_special()
        } else {
            self.scan_word()
        }
    }

    fn scan_word(&mut self) -> (Tok, String) {
        let mut buf = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            buf.push(ch);
        }
        let tok = keyword(&buf).unwrap_or(Tok::Ident);
        (tok, String::from_utf8_lossy(&buf).into_owned())
    }

    fn scan_special(&mut self) -> (Tok, String) {
        let mut buf = Vec::new();
        let mut last: Option<(Tok, usize)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special(ch) {
                self.unread();
                break;
            }
            buf.push(ch);
            if let Some(tok) = keyword(&buf) {
                last = Some((tok, buf.len()));
            } else if last.is_some() {
                self.unread();
                break;
            }
        }
        match last {
            Some((tok, len)) => (tok, String::from_utf8_lossy(&buf[..len]).into_owned()),
            None => (
                Tok::Error,
                format!(
                    "error expected: keyword found '{}'",
                    String::from_utf8_lossy(&buf)
                ),
            ),
        }
    }
}
