package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// fakeKV serves any method on a gRPC server: for etcdPutMethod it records
// the PutRequest's key and value and answers reply; anything else is
// Unimplemented.
func fakeKV(t *testing.T, reply []byte) (addr string, got chan [2][]byte) {
	t.Helper()
	got = make(chan [2][]byte, 1)
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		if method != etcdPutMethod {
			return status.Errorf(codes.Unimplemented, "%s", method)
		}
		var req rawMsg
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		key, err := field(req.b, 1)
		if err != nil {
			return err
		}
		val, err := field(req.b, 2)
		if err != nil {
			return err
		}
		got <- [2][]byte{key, val}
		return stream.SendMsg(&rawMsg{b: reply})
	}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), got
}

// putResponse encodes a PutResponse whose header has revision rev.
func putResponse(rev uint64) []byte {
	var h []byte
	h = protowire.AppendTag(h, 1, protowire.VarintType)
	h = protowire.AppendVarint(h, 7) // cluster_id
	h = protowire.AppendTag(h, 3, protowire.VarintType)
	h = protowire.AppendVarint(h, rev)
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, h)
}

func TestEtcdPut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reply   []byte
		wantErr string
	}{
		{name: "a PutResponse with a header", reply: putResponse(42)},
		{name: "no header", reply: nil, wantErr: "PutResponse: no field 1"},
		{name: "header without revision", reply: protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), nil), wantErr: "PutResponse.header: no field 3"},
		{name: "garbage", reply: []byte{0xff, 0xff}, wantErr: "PutResponse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, got := fakeKV(t, tc.reply)
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(t, err)
			defer conn.Close()
			err = etcdPut(context.Background(), conn, []byte("/bench/k"), []byte("value"))
			kv := <-got
			require.Equal(t, "/bench/k", string(kv[0]))
			require.Equal(t, "value", string(kv[1]))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
		})
	}
}

func TestPutRevision(t *testing.T) {
	rev, err := putRevision(putResponse(1234))
	require.NoError(t, err)
	require.Equal(t, int64(1234), rev)
}

// TestEtcdVersion: --peer-etcd names what it was given and why it is not
// an etcd, and accepts what prints etcd's version line.
func TestEtcdVersion(t *testing.T) {
	dir := t.TempDir()
	script := func(name, out string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\nprintf '"+out+"'\n"), 0o755))
		return p
	}
	v, err := etcdVersion(context.Background(), script("etcd", `etcd Version: 3.5.21\nGit SHA: x\n`))
	require.NoError(t, err)
	require.Equal(t, "3.5.21", v)

	notEtcd := script("other", `something else 1.0\n`)
	_, err = etcdVersion(context.Background(), notEtcd)
	require.ErrorContains(t, err, "--peer-etcd "+notEtcd+": not an etcd server binary")

	_, err = etcdVersion(context.Background(), filepath.Join(dir, "missing"))
	require.ErrorContains(t, err, "not an etcd server binary")
}
