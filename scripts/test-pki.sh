# Shared by clients.sh and tls-cost.sh (sourced, not run): a throwaway PKI for TLS runs.
# make_test_pki DIR NAME: writes DIR/ca.pem (a P-256 test CA named NAME), DIR/cert.pem (a
# certificate it signed for 127.0.0.1 and localhost, serverAuth) and DIR/key.pem, with the
# openssl CLI (installed with apt when missing: Debian's ca-certificates brings it anyway).
make_test_pki() {
    local dir="$1" name="$2"
    command -v openssl >/dev/null || apt-get install -y -qq --no-install-recommends openssl >/dev/null
    mkdir -p "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj "/CN=$name" -keyout "$dir/ca.key" -out "$dir/ca.pem" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=127.0.0.1" \
        -keyout "$dir/key.pem" -out "$dir/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
        >"$dir/server.ext"
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 2 -extfile "$dir/server.ext" -out "$dir/cert.pem" 2>/dev/null
}
