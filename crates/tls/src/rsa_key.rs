//! RSA private keys signed by *ring*, under the aws-lc-rs provider.
//!
//! An RSA-2048 full handshake is mostly its private-key operation (about 1.1 ms of 1.5 here).
//! *ring* and aws-lc run the same Montgomery assembly (BoringSSL's `mulx`/`adx` code), but
//! aws-lc also blinds every operation and goes through its EVP layer, and *ring*'s signature
//! measured about 35 µs (3%) cheaper per handshake on this machine (bench/README.md, "HTTPS").
//! *ring*'s exponentiation is constant-time without blinding, and it checks each signature
//! against the public key before it leaves, as aws-lc does, against fault attacks.
//!
//! Keys *ring* does not take (it signs with 2,048 to 8,192-bit moduli) stay with aws-lc, and
//! every other key type (ECDSA, Ed25519) is aws-lc's: its P-256 signature is the faster one.

use std::sync::Arc;

use rustls::crypto::ring::sign::RsaSigningKey;
use rustls::crypto::KeyProvider;
use rustls::sign::{Signer, SigningKey};
use rustls::{SignatureAlgorithm, SignatureScheme};
use rustls_pki_types::{PrivateKeyDer, SubjectPublicKeyInfoDer};

/// Loads keys with aws-lc-rs, then RSA keys again with *ring*, which signs them.
#[derive(Debug)]
pub(crate) struct RingRsa;

impl KeyProvider for RingRsa {
    fn load_private_key(
        &self,
        der: PrivateKeyDer<'static>,
    ) -> Result<Arc<dyn SigningKey>, rustls::Error> {
        let aws = rustls::crypto::aws_lc_rs::sign::any_supported_type(&der)?;
        if aws.algorithm() != SignatureAlgorithm::RSA {
            return Ok(aws);
        }
        match RsaSigningKey::new(&der) {
            Ok(ring) => Ok(Arc::new(RingRsaKey(ring))),
            Err(_) => Ok(aws),
        }
    }
}

/// *ring*'s RSA key, named as such in logs and debug output (both libraries' keys call
/// themselves `RsaSigningKey`).
#[derive(Debug)]
struct RingRsaKey(RsaSigningKey);

impl SigningKey for RingRsaKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        self.0.choose_scheme(offered)
    }

    fn public_key(&self) -> Option<SubjectPublicKeyInfoDer<'_>> {
        self.0.public_key()
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        self.0.algorithm()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature as sig;
    use rustls::SignatureScheme;

    #[test]
    fn rsa_keys_sign_every_scheme_and_the_public_key_verifies() {
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap();
        let der = PrivateKeyDer::try_from(kp.serialize_der()).unwrap();
        let k = RingRsa.load_private_key(der).unwrap();
        assert_eq!(k.algorithm(), SignatureAlgorithm::RSA);
        assert!(format!("{k:?}").starts_with("RingRsaKey"), "{k:?}");
        assert!(k.public_key().is_some(), "keys_match needs it");
        let public = kp.public_key_raw(); // PKCS#1 RSAPublicKey
        let schemes: [(SignatureScheme, &dyn sig::VerificationAlgorithm); 6] = [
            (
                SignatureScheme::RSA_PSS_SHA256,
                &sig::RSA_PSS_2048_8192_SHA256,
            ),
            (
                SignatureScheme::RSA_PSS_SHA384,
                &sig::RSA_PSS_2048_8192_SHA384,
            ),
            (
                SignatureScheme::RSA_PSS_SHA512,
                &sig::RSA_PSS_2048_8192_SHA512,
            ),
            (
                SignatureScheme::RSA_PKCS1_SHA256,
                &sig::RSA_PKCS1_2048_8192_SHA256,
            ),
            (
                SignatureScheme::RSA_PKCS1_SHA384,
                &sig::RSA_PKCS1_2048_8192_SHA384,
            ),
            (
                SignatureScheme::RSA_PKCS1_SHA512,
                &sig::RSA_PKCS1_2048_8192_SHA512,
            ),
        ];
        let msg = b"the handshake transcript";
        for (scheme, alg) in schemes {
            let signer = k
                .choose_scheme(&[scheme])
                .expect("every RSA scheme offered");
            assert_eq!(signer.scheme(), scheme);
            let s = signer.sign(msg).unwrap();
            sig::UnparsedPublicKey::new(alg, public)
                .verify(msg, &s)
                .unwrap_or_else(|_| panic!("{scheme:?} does not verify"));
            let mut bad = s.clone();
            bad[10] ^= 1;
            assert!(sig::UnparsedPublicKey::new(alg, public)
                .verify(msg, &bad)
                .is_err());
        }
    }

    #[test]
    fn ecdsa_keys_stay_with_aws_lc_and_sign() {
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let der = PrivateKeyDer::try_from(kp.serialize_der()).unwrap();
        let k = RingRsa.load_private_key(der).unwrap();
        assert_eq!(k.algorithm(), SignatureAlgorithm::ECDSA);
        assert!(!format!("{k:?}").contains("Ring"), "{k:?}");
        let signer = k
            .choose_scheme(&[SignatureScheme::ECDSA_NISTP256_SHA256])
            .unwrap();
        let s = signer.sign(b"m").unwrap();
        sig::UnparsedPublicKey::new(&sig::ECDSA_P256_SHA256_ASN1, kp.public_key_raw())
            .verify(b"m", &s)
            .unwrap();
    }
}
