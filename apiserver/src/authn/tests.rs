//! Tests of the authenticator chain.

use super::*;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

fn cert(cn: Option<&str>, orgs: &[&str]) -> CertificateDer<'static> {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    // rcgen keeps one value per attribute type: a second O goes in as a custom type with the
    // same OID (2.5.4.10).
    for (i, o) in orgs.iter().enumerate() {
        let ty = match i {
            0 => DnType::OrganizationName,
            1 => DnType::CustomDnType(vec![2, 5, 4, 10]),
            _ => panic!("at most two organizations"),
        };
        params.distinguished_name.push(ty, *o);
    }
    if let Some(cn) = cn {
        params.distinguished_name.push(DnType::CommonName, cn);
    }
    params.self_signed(&key).unwrap().der().clone()
}

fn tokens() -> TokenFile {
    TokenFile::parse("secret,alice,1001,\"dev,ops\"\nplain,bob,1002\n").unwrap()
}

#[tokio::test]
async fn x509_user_and_groups() {
    let auth = Authenticator::new(Some(tokens()));
    let chain = [cert(Some("jane"), &["system:masters", "team-a"])];
    let user = auth
        .authenticate(Some(&chain), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.name, "jane");
    assert_eq!(user.uid, "");
    assert_eq!(
        user.groups,
        ["system:masters", "team-a", AUTHENTICATED_GROUP]
    );
}

#[tokio::test]
async fn x509_wins_over_token() {
    let auth = Authenticator::new(Some(tokens()));
    let chain = [cert(Some("jane"), &[])];
    let user = auth
        .authenticate(Some(&chain), Some("Bearer secret"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.name, "jane");
    assert_eq!(user.groups, [AUTHENTICATED_GROUP]);
}

#[tokio::test]
async fn certificate_without_cn_falls_through_to_token() {
    let auth = Authenticator::new(Some(tokens()));
    let chain = [cert(None, &["x"])];
    assert_eq!(auth.authenticate(Some(&chain), None).await.unwrap(), None);
    let user = auth
        .authenticate(Some(&chain), Some("Bearer plain"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.name, "bob");
}

#[tokio::test]
async fn garbage_certificate_is_an_error() {
    let auth = Authenticator::new(None);
    let chain = [CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00])];
    assert!(matches!(
        auth.authenticate(Some(&chain), None).await,
        Err(AuthnError::InvalidCertificate(_))
    ));
}

#[tokio::test]
async fn bearer_tokens() {
    let auth = Authenticator::new(Some(tokens()));
    let user = auth
        .authenticate(None, Some("Bearer secret"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        user,
        UserInfo {
            name: "alice".into(),
            uid: "1001".into(),
            groups: vec!["dev".into(), "ops".into(), AUTHENTICATED_GROUP.into()],
            ..UserInfo::default()
        }
    );
    // Scheme is case-insensitive, surrounding whitespace is ignored.
    let user = auth
        .authenticate(None, Some("  bearer plain "))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.name, "bob");
    assert!(matches!(
        auth.authenticate(None, Some("Bearer wrong")).await,
        Err(AuthnError::InvalidBearerToken)
    ));
    assert!(matches!(
        auth.authenticate(None, Some("Bearer  secret")).await,
        Err(AuthnError::InvalidBearerToken)
    ));
    assert_eq!(
        auth.authenticate(None, Some("Basic YWxpY2U6eA=="))
            .await
            .unwrap(),
        None
    );
    assert_eq!(auth.authenticate(None, Some("Bearer")).await.unwrap(), None);
    assert_eq!(auth.authenticate(None, None).await.unwrap(), None);
    assert_eq!(auth.authenticate(Some(&[]), None).await.unwrap(), None);
}

#[tokio::test]
async fn no_token_file_ignores_bearer() {
    let auth = Authenticator::new(None);
    assert_eq!(
        auth.authenticate(None, Some("Bearer secret"))
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn authenticated_group_not_duplicated() {
    let auth = Authenticator::new(None);
    let chain = [cert(Some("x"), &[AUTHENTICATED_GROUP])];
    let user = auth
        .authenticate(Some(&chain), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.groups, [AUTHENTICATED_GROUP]);
}
