use super::nonce_value;

#[test]
fn the_nonce_is_sent_unchanged_and_never_indexed() {
    let nonce = "AAAAAGsGz-rVoLaU7qFAfAARxb_kP9NyVvhJExRSqfsj1KHxT8whH_Pyjp-X";
    let value = nonce_value(nonce).expect("a base64url nonce is a valid header value");
    assert_eq!(value.to_str().expect("ASCII"), nonce);
    assert!(
        value.is_sensitive(),
        "h2 indexes every value not marked sensitive"
    );
}

#[test]
fn a_value_no_header_can_carry_is_left_out() {
    assert!(nonce_value("line\nbreak").is_none());
}
