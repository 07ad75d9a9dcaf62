package api_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"trainyard/internal/domain"
)

// BenchmarkArtifactDownload measures GET /api/v1/jobs/{id}/artifacts/{path}
// of a 256 MiB output file over loopback HTTP, with the client hashing
// what it receives as trainyard artifacts get does.
func BenchmarkArtifactDownload(b *testing.B) {
	e := newEnv(b)
	_, job := e.submit("name: big\nentrypoint: [\"true\"]\n")
	j, err := e.st.GetJob(context.Background(), job.ID)
	if err != nil {
		b.Fatal(err)
	}
	const size = 256 << 20
	data := make([]byte, size)
	rand.Read(data)
	if err := os.MkdirAll(j.OutputDir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(j.OutputDir, "model.bin"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	if err := e.st.RecordManifest(context.Background(), domain.Manifest{JobID: j.ID, Attempt: 1, At: time.Now(),
		Files: []domain.ArtifactFile{{Path: "model.bin", Size: size, SHA256: want}}}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/v1/jobs/%d/artifacts/model.bin", e.srv.URL, j.ID), nil)
		req.Header.Set("Authorization", "Bearer "+e.token)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if err != nil || n != size || hex.EncodeToString(h.Sum(nil)) != want {
			b.Fatalf("got %d bytes, %v", n, err)
		}
	}
}
