//! Just enough DER to put exact names into a certificate rcgen built: the issuer must be the
//! CA certificate's subject byte for byte (or clients will not chain it), and the subject the
//! request's own (rcgen keeps one value per attribute type, but a client certificate carries
//! one O per group). The names are swapped in the to-be-signed part, which is then signed again.

const SEQUENCE: u8 = 0x30;
const BIT_STRING: u8 = 0x03;
const EXPLICIT_VERSION: u8 = 0xa0;

/// One element: its tag, and where its whole encoding and its contents lie in the input.
struct Element<'a> {
    whole: &'a [u8],
    tag: u8,
    contents: &'a [u8],
}

fn malformed(what: &str) -> String {
    format!("malformed certificate DER: {what}")
}

/// Splits the first element off `input`.
fn element(input: &[u8]) -> Result<(Element<'_>, &[u8]), String> {
    let (&tag, rest) = input.split_first().ok_or_else(|| malformed("empty"))?;
    let (&first, rest) = rest.split_first().ok_or_else(|| malformed("no length"))?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return Err(malformed("bad length"));
        }
        let length = rest[..count]
            .iter()
            .fold(0usize, |sum, byte| (sum << 8) | usize::from(*byte));
        (length, &rest[count..])
    };
    if rest.len() < length {
        return Err(malformed("truncated"));
    }
    let header = input.len() - rest.len();
    let element = Element {
        whole: &input[..header + length],
        tag,
        contents: &rest[..length],
    };
    Ok((element, &rest[length..]))
}

/// Every element of `input`, in order.
fn elements(mut input: &[u8]) -> Result<Vec<Element<'_>>, String> {
    let mut all = Vec::new();
    while !input.is_empty() {
        let (next, rest) = element(input)?;
        all.push(next);
        input = rest;
    }
    Ok(all)
}

/// `tag`, the DER length of `contents`, and `contents`.
fn encode(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let length = contents.len();
    if length < 0x80 {
        out.push(length as u8);
    } else {
        let bytes = length.to_be_bytes();
        let skip = bytes.iter().take_while(|byte| **byte == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(contents);
    out
}

/// `certificate` with its issuer and subject replaced by the given DER Names, signed again by
/// `sign` (with the algorithm the certificate already names).
pub fn with_names(
    certificate: &[u8],
    issuer: &[u8],
    subject: &[u8],
    sign: impl FnOnce(&[u8]) -> Result<Vec<u8>, String>,
) -> Result<Vec<u8>, String> {
    let (outer, _) = element(certificate)?;
    let parts = elements(outer.contents)?;
    let [tbs, algorithm, _signature] = parts.as_slice() else {
        return Err(malformed("a certificate has three parts"));
    };
    if outer.tag != SEQUENCE || tbs.tag != SEQUENCE {
        return Err(malformed("not a SEQUENCE"));
    }
    let fields = elements(tbs.contents)?;
    // version?, serialNumber, signature, issuer, validity, subject, …
    let first = usize::from(fields.first().is_some_and(|f| f.tag == EXPLICIT_VERSION));
    let (issuer_at, subject_at) = (first + 2, first + 4);
    if fields.len() <= subject_at {
        return Err(malformed("the to-be-signed part is too short"));
    }
    let mut contents = Vec::with_capacity(tbs.contents.len() + issuer.len() + subject.len());
    for (index, field) in fields.iter().enumerate() {
        let replacement = match index {
            i if i == issuer_at => issuer,
            i if i == subject_at => subject,
            _ => field.whole,
        };
        contents.extend_from_slice(replacement);
    }
    let tbs = encode(SEQUENCE, &contents);
    let signature = sign(&tbs)?;
    let mut bits = Vec::with_capacity(signature.len() + 1);
    bits.push(0);
    bits.extend_from_slice(&signature);
    let mut body = tbs;
    body.extend_from_slice(algorithm.whole);
    body.extend_from_slice(&encode(BIT_STRING, &bits));
    Ok(encode(SEQUENCE, &body))
}

/// `der` as a PEM `CERTIFICATE` block.
pub fn certificate_pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in text.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}
