"""What `invoke status` shows from Prometheus: no figure that cannot be true."""



def test_status_shows_no_impossible_decode_speed():
    from clusterbook.commands.runbooks import decode_text

    assert decode_text("20", "0.00002") == "- (too few tokens to tell)"  # issue 32: 1,000,000 tok/s from the probe's
    assert decode_text("3", "0.5") == "- (too few tokens to tell)"  # one-token completions, or three tokens
    assert decode_text("NaN", "NaN") == "- (too few tokens to tell)"
    assert decode_text("640", "30") == "21.3"
    assert decode_text("640", "1.0") == "640.0"  # a tiny lab model is fast, and that is a speed
    assert decode_text(None, None) == "- (no generation)"
