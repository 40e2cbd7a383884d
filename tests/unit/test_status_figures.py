"""What `invoke status` shows from Prometheus: no figure that cannot be true."""



def test_status_shows_no_impossible_decode_speed():
    from clusterbook.commands.runbooks import decode_text

    assert decode_text("1000000.0", 23.9) == "- (too few tokens to tell)"  # issue 32: a few tokens, rounded seconds
    assert decode_text("NaN", 23.9) == "- (too few tokens to tell)"
    assert decode_text("21.34", 23.9) == "21.3"
    assert decode_text(None, 23.9) == "- (no generation)"
