"""The committed generated code (server/grpc/v2) is exactly what `make protos` produces from the protos."""

from pathlib import Path

import pytest

from server.grpc import codegen

pytest.importorskip("grpc_tools", reason="grpcio-tools is a test extra (make setup installs it)")
pytest.importorskip("mypy_protobuf", reason="mypy-protobuf is a test extra (make setup installs it)")


def test_regeneration_equals_committed(tmp_path):
    names = codegen.generate(str(tmp_path))
    committed = Path(codegen.HERE) / "v2"
    assert sorted(names) == sorted(p.name for p in committed.iterdir() if p.name.endswith(codegen.GENERATED_SUFFIXES))
    for name in names:
        assert (tmp_path / name).read_text() == (committed / name).read_text(), f"{name} differs: run make protos"


def test_protos_keep_their_licence_header():
    for name in codegen.PROTO_FILES:
        text = (Path(codegen.PROTO_ROOT) / "apache/rocketmq/v2" / f"{name}.proto").read_text()
        assert text.startswith("// Licensed to the Apache Software Foundation (ASF)")
