// deskgrid: the session's container is the sandbox; Firefox's own cannot start in it.
pref("security.sandbox.content.level", 0);
pref("media.cdm.sandbox.level", 0);
// No first run, no default-browser question, no background network traffic.
pref("browser.shell.checkDefaultBrowser", false);
pref("browser.startup.homepage_override.mstone", "ignore");
pref("browser.aboutwelcome.enabled", false);
pref("startup.homepage_welcome_url", "");
pref("startup.homepage_welcome_url.additional", "");
pref("datareporting.policy.dataSubmissionEnabled", false);
pref("datareporting.healthreport.uploadEnabled", false);
pref("toolkit.telemetry.enabled", false);
pref("toolkit.telemetry.unified", false);
pref("app.update.enabled", false);
pref("app.normandy.enabled", false);
pref("extensions.update.enabled", false);
pref("browser.safebrowsing.malware.enabled", false);
pref("browser.safebrowsing.phishing.enabled", false);
pref("browser.safebrowsing.downloads.enabled", false);
pref("network.captive-portal-service.enabled", false);
pref("network.connectivity-service.enabled", false);
pref("browser.newtabpage.activity-stream.feeds.topsites", false);
pref("browser.newtabpage.activity-stream.feeds.section.topstories", false);
pref("browser.ping-centre.telemetry", false);
// Accessibility tree always on.
pref("accessibility.force_disabled", -1);
