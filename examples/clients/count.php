<?php
// Count a page view after the page has been sent: the visitor never waits for the
// counter. Under PHP-FPM, fastcgi_finish_request() ends the response to the browser;
// the script then goes on and posts the increment with a short timeout. Fire-and-forget:
// no Idempotency-Key (a key would write a row per view), one attempt of at most 1 s, and
// nothing thrown: a failure is logged and the view dropped. SLOTTED_TOKEN, when set, is
// the daemon's bearer token.

function slotted_count(string $base, $recordType, $recordId, int $delta = 1): bool
{
    $body = json_encode(['record_type' => $recordType, 'record_id' => (string)$recordId,
                         'delta' => $delta]);
    $context = stream_context_create(['http' => [
        'method' => 'POST',
        'header' => "Content-Type: application/json\r\nPrefer: return=minimal\r\n"
                    . (getenv('SLOTTED_TOKEN') ? 'Authorization: Bearer ' . getenv('SLOTTED_TOKEN') . "\r\n" : ''),
        'content' => $body,
        'timeout' => 1.0,          // seconds; a counter is never worth a stuck worker
        'ignore_errors' => true,   // read 4xx/5xx answers instead of warning
    ]]);
    $answer = @file_get_contents($base . '/v1/increments', false, $context);
    $status = isset($http_response_header[0]) ? (int)explode(' ', $http_response_header[0])[1] : 0;
    if ($status !== 204 && $status !== 202) {
        error_log("slotted-counterd: increment not counted (HTTP $status): " . (string)$answer);
        return false;
    }
    return true;
}

// ... render the page here ...
echo "page rendered\n";

if (function_exists('fastcgi_finish_request')) {
    fastcgi_finish_request();      // the browser has its page; the rest runs after
}
$base = getenv('SLOTTED_URL') ?: 'http://127.0.0.1:8080';
exit(slotted_count($base, 'repo_downloads', 42) ? 0 : 1);
