package nbd_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log"
	"os"

	"github.com/nhdkit/nhd/nbd"
)

// A server that admits only clients whose certificate a CA signed: the
// check is crypto/tls's, and RequireTLS keeps clients from skipping it.
func ExampleServer_clientCertificates() {
	cert, err := tls.LoadX509KeyPair("server-cert.pem", "server-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	pem, err := os.ReadFile("clients-ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	clients := x509.NewCertPool()
	if !clients.AppendCertsFromPEM(pem) {
		log.Fatal("no CA certificate in clients-ca.pem")
	}
	srv := &nbd.Server{
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    clients,
			MinVersion:   tls.VersionTLS12,
		},
		RequireTLS: true,
		Exports:    []nbd.Export{{Name: "disk", Backend: nbd.NewMemDisk(64 << 20)}},
	}
	log.Fatal(srv.ListenAndServe("tcp", ":10809"))
}

// A client presenting its certificate, from a directory laid out as
// libnbd's tls-certificates (ca-cert.pem, client-cert.pem,
// client-key.pem): through WithTLS, or through an nbds URI.
func ExampleLoadTLSCertificates() {
	ctx := context.Background()
	cfg, err := nbd.LoadTLSCertificates("/etc/pki/nbd-client")
	if err != nil {
		log.Fatal(err)
	}
	cfg.ServerName = "storage.example"
	c, err := nbd.Dial(ctx, "nbd://storage.example/disk", nbd.WithTLS(cfg))
	if err != nil {
		log.Fatal(err)
	}
	c.Close()

	// The same, as nbdinfo and nbdcopy would be told.
	c, err = nbd.Dial(ctx, "nbds://storage.example/disk?tls-certificates=/etc/pki/nbd-client")
	if err != nil {
		log.Fatal(err)
	}
	c.Close()
}
