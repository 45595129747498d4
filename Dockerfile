# syntax=docker/dockerfile:1
# nogoo9 image: `make docker-build`. The binary is the one `make build` produces: static
# (CGO_ENABLED=0), -trimpath, stripped (-s -w), version stamped with -X main.version.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so source edits do not re-download them.
COPY go.mod go.sum ./
RUN go mod download
COPY main.go ./
COPY controllers/ controllers/
COPY pkg/ pkg/
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/nogoo9 .

# distroless static: no shell, no package manager, CA certificates and /etc/passwd for nonroot.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/nogoo9 /nogoo9
USER 65532:65532
EXPOSE 8080 8081 8090 8091
ENTRYPOINT ["/nogoo9"]
