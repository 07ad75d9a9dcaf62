package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 to dir/cert.pem
// (key in dir/key.pem) and returns its path and a client that trusts it.
func selfSigned(t testing.TB, dir string) (string, *http.Client) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "trainyard test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	cert := filepath.Join(dir, "cert.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return cert, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// The server speaks HTTPS with --tls-cert/--tls-key; the CLI trusts it with
// --ca-file (here TRAINYARD_CA_FILE) and refuses it without.
func TestTLS(t *testing.T) {
	s := startServer(t, serverOpts{tls: true})
	if !strings.HasPrefix(s.url, "https://") {
		t.Fatalf("server URL %s is not https", s.url)
	}
	id := strings.TrimSpace(s.mustCLI("submit", filepath.Join(repoRoot(), "examples", "smoke.yaml")))
	if out := s.mustCLI("ls"); !strings.Contains(out, id) {
		t.Errorf("ls over TLS lacks job %s:\n%s", id, out)
	}
	ca := s.caFile
	s.caFile = ""
	_, errOut, code := s.cli("ls")
	s.caFile = ca
	if code == 0 || !strings.Contains(errOut, "certificate") {
		t.Errorf("ls without the CA: exit %d, %q; want a certificate error", code, errOut)
	}
	// Plain HTTP to the TLS port is refused, not served.
	if resp, err := http.Get("http://" + strings.TrimPrefix(s.url, "https://") + "/healthz"); err == nil && resp.StatusCode == 200 {
		t.Error("plain HTTP was served on the TLS port")
	}
}
