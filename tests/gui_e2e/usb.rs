//! USB: a recorded security key redirected into alice's desktop and detached.

use std::time::{Duration, Instant};

use corral_tests::client_as;

use crate::driver::{
    Gui, alices_running_desktop, click, exists, js, text_of, wait_text, wait_until_async,
};

#[tokio::test]
async fn alice_redirects_a_recorded_security_key_into_her_desktop_and_detaches_it() {
    // The app reads a recorded device list (usb-fixture build) and runs the stand-in
    // usbredirect: this machine has no USB bus.
    let path = format!(
        "{}:{}",
        corral_tests::stand_in_usbredirect_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let gui = Gui::launch_with(&[
        (
            "CORRAL_USB_FIXTURE",
            corral_tests::usb_fixture().display().to_string(),
        ),
        ("CORRAL_STAND_IN_DEVICES", "1050:0407,1-7,1-9".to_owned()),
        ("PATH", path),
    ])
    .await;
    let client = &gui.client;
    text_of(client, "[data-testid='pool-corral-vms-legacy']").await;
    let member = alices_running_desktop(client, "usbp").await;

    click(client, "[data-testid='usb-button']").await;
    let row = wait_text(client, "[data-testid='usb-device-1050-0407']", "YubiKey").await;
    assert!(
        exists(
            client,
            "[data-testid='usb-device-1050-0407'] [data-testid='usb-mark-securityKey']"
        )
        .await,
        "{row}"
    );
    let stick = text_of(client, "[data-testid='usb-access-0781-5567']").await;
    assert!(
        stick.contains("/dev/bus/usb/002/002") && stick.contains("uaccess"),
        "{stick}"
    );
    click(client, "[data-testid='usb-redirect-1050-0407']").await;
    click(client, &format!("[data-testid='usb-target-{member}']")).await;
    let notice = wait_text(client, "[data-testid='usb-notice']", "Live migration").await;
    assert!(notice.contains("full control"), "{notice}");
    gui.screenshot("e2e-usb-confirm.png");
    click(client, "[data-testid='usb-attach']").await;
    let attached = wait_text(client, "[data-testid='usb-attached-1050-0407']", &member).await;
    eprintln!("{attached}");
    let shown = js(
        client,
        r#"return document.querySelectorAll("[data-testid='usb-attached-1050-0407']").length;"#,
    )
    .await;
    assert_eq!(
        shown, 1,
        "only the YubiKey at 1-7 is attached, not its twin at 1-9"
    );
    let vmis = corral_tests::vmis(&client_as("admin").await, "corral-vms");
    let count = |vmi: kube::api::DynamicObject| {
        vmi.metadata
            .annotations
            .and_then(|a| a.get("sandbox.corral.dev/usbredir-attached").cloned())
            .unwrap_or_default()
    };
    wait_until_async("the device attached to the VMI", || async {
        count(vmis.get(&member).await.unwrap()) == "1"
    })
    .await;
    gui.screenshot("e2e-usb-attached.png");
    click(client, "[data-testid='usb-detach-1050-0407']").await;
    wait_until_async("the device detached from the VMI", || async {
        count(vmis.get(&member).await.unwrap()) == "0"
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while exists(client, "[data-testid='usb-attached-1050-0407']").await {
        assert!(Instant::now() < deadline, "still shown as attached");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gui.close().await;
}
