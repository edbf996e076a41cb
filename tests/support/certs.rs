//! Test certificates made at test time with rcgen: a CA, a server certificate for
//! 127.0.0.1 and localhost, and a client certificate, all as PEM files in a directory.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write PEM");
    path
}

/// A CA named `name` and a server and a client certificate it signed, under `dir`.
pub fn generate(dir: &Path, name: &str) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{name} test CA"));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca =
        CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("CA");

    let mut server = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("server params");
    server
        .distinguished_name
        .push(DnType::CommonName, "eventgate test server");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().expect("key");
    let server_cert = server.signed_by(&server_key, &ca).expect("server cert");

    let mut client = CertificateParams::new(Vec::<String>::new()).expect("client params");
    client
        .distinguished_name
        .push(DnType::CommonName, "eventgate test client");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate().expect("key");
    let client_cert = client.signed_by(&client_key, &ca).expect("client cert");

    Pki {
        ca: write(dir, &format!("{name}-ca.pem"), &ca.pem()),
        server_cert: write(dir, &format!("{name}-server.pem"), &server_cert.pem()),
        server_key: write(
            dir,
            &format!("{name}-server.key"),
            &server_key.serialize_pem(),
        ),
        client_cert: write(dir, &format!("{name}-client.pem"), &client_cert.pem()),
        client_key: write(
            dir,
            &format!("{name}-client.key"),
            &client_key.serialize_pem(),
        ),
    }
}
