package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AdminUser is the user the admin token authenticates as (group system:masters).
const AdminUser = "nogoo9-admin"

// writePKI makes everything the API server needs to serve TLS, authenticate the admin and sign
// service-account tokens, in Go (no openssl): a CA, a serving certificate for 127.0.0.1 signed by
// it, an RSA service-account key pair and a token file. It returns the admin token.
func writePKI(l layout) (string, error) {
	if err := os.MkdirAll(l.pkiDir(), 0o700); err != nil {
		return "", err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nogoo9-local-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", fmt.Errorf("create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return "", fmt.Errorf("create serving certificate: %w", err)
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return "", err
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return "", err
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return "", err
	}
	token := hex.EncodeToString(tok)

	files := []struct {
		path string
		data []byte
	}{
		{l.caCert(), pemBlock("CERTIFICATE", caDER)},
		{l.servingCert(), pemBlock("CERTIFICATE", srvDER)},
		{l.servingKey(), pemBlock("EC PRIVATE KEY", srvKeyDER)},
		{l.saKey(), pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey))},
		{l.saPub(), pemBlock("PUBLIC KEY", saPub)},
		{l.tokenFile(), []byte(fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", token, AdminUser, AdminUser))},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return "", err
		}
	}
	return token, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// WriteKubeconfig writes a kubeconfig at path that reaches server as the bearer of token,
// trusting the CA in caFile (embedded, so the file can be copied elsewhere).
func WriteKubeconfig(path, server, caFile, token string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("read CA %s: %w", caFile, err)
	}
	const name = "nogoo9-local"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = name
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}
