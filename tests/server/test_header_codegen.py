"""The committed hot-path header parsers (server/header_parsers.py) are exactly what `make headers`
writes from the declarations in server/headers.py: a changed declaration without a regeneration fails here."""

from pathlib import Path

from server import header_codegen


def test_regeneration_equals_committed(tmp_path):
    out = tmp_path / "header_parsers.py"
    assert header_codegen.main([str(out)]) == 0
    committed = Path(header_codegen.OUT_FILE).read_text(encoding="utf-8")
    assert out.read_text(encoding="utf-8") == committed, "server/header_parsers.py differs: run make headers"


def test_a_changed_declaration_changes_the_text():
    """The comparison above can fail: the text follows the declaration (one more field, one more read)."""
    from codec.codes import SEND_MESSAGE_REQUEST_HEADER_V2
    from server import headers
    from server.header_spec import HeaderSpec

    class Wider(headers.SendMessageHeader):
        bname: str | None

    spec = HeaderSpec(Wider, v2_names=SEND_MESSAGE_REQUEST_HEADER_V2)
    text = header_codegen.parser_source(spec, "parse_send", True, "SEND_MESSAGE.parse")
    assert "bname = _get('n')" in text
    assert "bname = _get('n')" not in header_codegen.render()
