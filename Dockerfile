# Build: a static, CGO-free binary (modernc.org/sqlite is pure Go).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/geohub ./cmd/geohub && mkdir -p /out/data

# Run: nothing but the binary and CA roots, as an unprivileged user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/geohub /usr/local/bin/geohub
# The data directory belongs to the unprivileged user (uid 65532), 0700.
COPY --from=build --chown=65532:65532 --chmod=0700 /out/data /data
ENV GEOHUB_DATA=/data \
    GEOHUB_ADDR=0.0.0.0:8080
VOLUME ["/data"]
EXPOSE 8080
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/geohub"]
CMD ["serve"]
