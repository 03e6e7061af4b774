package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"geohub/app/callback"
	"io"
	"net"
	"strings"
	"syscall"
)

// transportError says in pt-BR why an attempt got no HTTP answer, for the
// operators who read it on the console (SPEC 9), and keeps Go's own text
// after it for whoever debugs the network. It wraps err: errors.Is still
// sees the cause.
func transportError(err error) error {
	return fmt.Errorf("%s (detalhe: %w)", transportReason(err), err)
}

func transportReason(err error) string {
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	var ne net.Error
	switch {
	case errors.Is(err, callback.ErrRefusedAddress):
		return "endereço do callback recusado: privado, loopback ou reservado"
	case errors.As(err, &dns) && dns.IsNotFound:
		return "o nome do host do callback não existe (DNS)"
	case errors.As(err, &dns):
		return "falha ao resolver o nome do host do callback (DNS)"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "conexão recusada: nada escuta no endereço do callback"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "conexão interrompida pelo receptor"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "receptor inalcançável pela rede"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "o receptor não respondeu a tempo"
	case errors.As(err, &cert), errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid):
		return "certificado TLS do receptor inválido ou não confiável"
	case errors.As(err, &record), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		// net/http reports the second without a type of its own.
		return "o receptor não respondeu em TLS (https)"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "o receptor fechou a conexão sem responder"
	}
	return "falha de rede ao contatar o receptor"
}
