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
	"os/exec"
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
	// Without the CA (nor the config the first start wrote, which names
	// it) the CLI refuses the certificate.
	if err := os.Remove(filepath.Join(s.dir, "home", ".config", "trainyard", "config.yaml")); err != nil {
		t.Fatal(err)
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

// On a TLS first start the server writes the CLI config with the
// certificate as ca_file, so the CLI on the same machine works with nothing
// but that config: no TRAINYARD_* variables, no --ca-file.
func TestTLSFirstStartCLIConfig(t *testing.T) {
	s := startServer(t, serverOpts{tls: true})
	cfg, err := os.ReadFile(filepath.Join(s.dir, "home", ".config", "trainyard", "config.yaml"))
	if err != nil {
		t.Fatalf("the first start wrote no CLI config: %v", err)
	}
	if !strings.Contains(string(cfg), "ca_file: "+s.caFile+"\n") {
		t.Fatalf("CLI config lacks ca_file %s:\n%s", s.caFile, cfg)
	}
	cmd := exec.Command(binary, "whoami")
	cmd.Env = []string{"HOME=" + filepath.Join(s.dir, "home"), "XDG_CONFIG_HOME=" + filepath.Join(s.dir, "home", ".config"), "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "admin") {
		t.Fatalf("trainyard whoami with only the written config: %v\n%s", err, out)
	}
	if strings.Contains(s.stderrText(), "without TLS") {
		t.Errorf("the TLS server warned about plain HTTP:\n%s", s.stderrText())
	}
}
