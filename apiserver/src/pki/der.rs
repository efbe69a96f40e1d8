//! Minimal DER surgery on certificates rcgen produced: set the exact issuer and subject names
//! (rcgen's `DistinguishedName` holds one value per attribute type, but Kubernetes needs one
//! O per group, and issuer names must be byte-identical to the CA's subject), then re-sign.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::PkiError;

const TAG_SEQUENCE: u8 = 0x30;
const TAG_SET: u8 = 0x31;
const TAG_OID: u8 = 0x06;
const TAG_UTF8_STRING: u8 = 0x0c;
const TAG_BIT_STRING: u8 = 0x03;
const TAG_VERSION: u8 = 0xa0;

/// Attribute types used in the subjects we write.
#[derive(Clone, Copy, Debug)]
pub(super) enum NameAttr {
    CommonName,
    Organization,
}

impl NameAttr {
    fn oid(self) -> &'static [u8] {
        match self {
            NameAttr::CommonName => &[0x55, 0x04, 0x03],
            NameAttr::Organization => &[0x55, 0x04, 0x0a],
        }
    }
}

fn bad(what: &str) -> PkiError {
    PkiError::Generate(format!("malformed DER: {what}"))
}

/// Append a TLV with the given tag and contents.
fn push_tlv(out: &mut Vec<u8>, tag: u8, contents: &[u8]) {
    out.push(tag);
    let len = contents.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(contents);
}

fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(contents.len() + 6);
    push_tlv(&mut out, tag, contents);
    out
}

/// One DER element at the front of some input.
struct Tlv<'a> {
    tag: u8,
    contents: &'a [u8],
    /// The whole element: header and contents.
    whole: &'a [u8],
    /// The input after the element.
    rest: &'a [u8],
}

/// Split one TLV off the front of `input`.
fn read_tlv(input: &[u8]) -> Result<Tlv<'_>, PkiError> {
    let (&tag, rest) = input.split_first().ok_or_else(|| bad("truncated tag"))?;
    let (&first, rest) = rest.split_first().ok_or_else(|| bad("truncated length"))?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(bad("unsupported length"));
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(bad("truncated contents"));
    }
    let header = input.len() - rest.len();
    Ok(Tlv {
        tag,
        contents: &rest[..len],
        whole: &input[..header + len],
        rest: &rest[len..],
    })
}

/// The elements of a SEQUENCE's contents.
fn children(mut contents: &[u8]) -> Result<Vec<&[u8]>, PkiError> {
    let mut out = Vec::new();
    while !contents.is_empty() {
        let tlv = read_tlv(contents)?;
        out.push(tlv.whole);
        contents = tlv.rest;
    }
    Ok(out)
}

/// A DER `Name` with one RDN per attribute, values as UTF8String, in the given order.
pub(super) fn encode_name(attrs: &[(NameAttr, &str)]) -> Vec<u8> {
    let mut rdns = Vec::new();
    for (attr, value) in attrs {
        let mut pair = tlv(TAG_OID, attr.oid());
        push_tlv(&mut pair, TAG_UTF8_STRING, value.as_bytes());
        let set = tlv(TAG_SET, &tlv(TAG_SEQUENCE, &pair));
        rdns.extend_from_slice(&set);
    }
    tlv(TAG_SEQUENCE, &rdns)
}

/// Replace the issuer and subject names of `cert` (DER) and re-sign its TBS part with `sign`
/// (which must use the algorithm the certificate already names).
pub(super) fn replace_names(
    cert: &[u8],
    issuer: &[u8],
    subject: &[u8],
    sign: impl FnOnce(&[u8]) -> Result<Vec<u8>, PkiError>,
) -> Result<Vec<u8>, PkiError> {
    let outer = read_tlv(cert)?;
    if outer.tag != TAG_SEQUENCE || !outer.rest.is_empty() {
        return Err(bad("certificate is not a single SEQUENCE"));
    }
    let parts = children(outer.contents)?;
    let [tbs, algorithm, _signature] = parts[..] else {
        return Err(bad("certificate does not have three parts"));
    };
    let tbs = read_tlv(tbs)?;
    if tbs.tag != TAG_SEQUENCE {
        return Err(bad("TBSCertificate is not a SEQUENCE"));
    }
    let mut fields = children(tbs.contents)?;
    // version [0] (optional), serial, signature algorithm, issuer, validity, subject, ...
    let offset = usize::from(fields.first().and_then(|f| f.first()) == Some(&TAG_VERSION));
    if fields.len() < offset + 6 {
        return Err(bad("TBSCertificate too short"));
    }
    fields[offset + 2] = issuer;
    fields[offset + 4] = subject;
    let new_tbs = tlv(TAG_SEQUENCE, &fields.concat());
    let signature = sign(&new_tbs)?;
    let mut bits = Vec::with_capacity(signature.len() + 1);
    bits.push(0); // no unused bits
    bits.extend_from_slice(&signature);
    let mut body = new_tbs;
    body.extend_from_slice(algorithm);
    push_tlv(&mut body, TAG_BIT_STRING, &bits);
    Ok(tlv(TAG_SEQUENCE, &body))
}

/// PEM-encode a DER certificate.
pub(super) fn cert_pem(der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 64);
    out.push_str("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::prelude::FromDer;

    #[test]
    fn long_lengths_round_trip() {
        for len in [0usize, 1, 127, 128, 255, 256, 70_000] {
            let contents = vec![7u8; len];
            let encoded = tlv(TAG_SEQUENCE, &contents);
            let t = read_tlv(&encoded).unwrap();
            assert_eq!(
                (t.tag, t.contents.len(), t.whole.len(), t.rest.len()),
                (TAG_SEQUENCE, len, encoded.len(), 0)
            );
        }
    }

    #[test]
    fn name_with_repeated_organizations() {
        let name = encode_name(&[
            (NameAttr::Organization, "system:masters"),
            (NameAttr::Organization, "team"),
            (NameAttr::CommonName, "admin"),
        ]);
        let (_, parsed) = x509_parser::x509::X509Name::from_der(&name).unwrap();
        let orgs: Vec<_> = parsed
            .iter_organization()
            .map(|o| o.as_str().unwrap())
            .collect();
        assert_eq!(orgs, ["system:masters", "team"]);
        assert_eq!(
            parsed.iter_common_name().next().unwrap().as_str().unwrap(),
            "admin"
        );
    }

    #[test]
    fn malformed_input_is_an_error() {
        assert!(read_tlv(&[0x30]).is_err());
        assert!(read_tlv(&[0x30, 0x05, 0x00]).is_err());
        assert!(replace_names(&[0x30, 0x00], &[], &[], |_| Ok(vec![])).is_err());
    }
}
