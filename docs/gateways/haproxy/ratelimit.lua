-- HAProxy 2.6+: an http-request action that asks ratelimit_server's forward-auth check about
-- the request (docs/gateways.md), on HAProxy's own HTTP client (core.httpclient).
--
--   http-request lua.ratelimit_check CHECK_URL FAILURE
--
-- CHECK_URL: http://host:port/check/<domain>. FAILURE: "open" or "closed", what to do when the
-- check cannot answer (down, timed out, or a 5xx: core.httpclient reports a failed connection
-- as status 503). It sets transaction variables for haproxy.cfg to act on:
--   txn.ratelimit_status        200 (let through), 429 (denied), or 503 (failed closed)
--   txn.ratelimit_policy, txn.ratelimit, txn.ratelimit_limit, txn.ratelimit_remaining,
--   txn.ratelimit_reset, txn.ratelimit_retry_after   the check's headers, when it sent them

local carried = {
  ["ratelimit-policy"] = "txn.ratelimit_policy",
  ["ratelimit"] = "txn.ratelimit",
  ["x-ratelimit-limit"] = "txn.ratelimit_limit",
  ["x-ratelimit-remaining"] = "txn.ratelimit_remaining",
  ["x-ratelimit-reset"] = "txn.ratelimit_reset",
  ["retry-after"] = "txn.ratelimit_retry_after",
}

-- Headers the check must not take from the client: the original request's attributes are
-- set here, and the connection's own headers belong to this hop.
local replaced = {
  ["x-forwarded-method"] = true, ["x-forwarded-uri"] = true, ["x-forwarded-host"] = true,
  ["x-forwarded-proto"] = true, ["x-forwarded-for"] = true, ["x-original-uri"] = true,
  ["x-original-method"] = true, ["x-ratelimit-deny-status"] = true, ["host"] = true,
  ["content-length"] = true, ["transfer-encoding"] = true, ["connection"] = true,
  ["keep-alive"] = true, ["expect"] = true,
}

-- The first value of a header in a table of HAProxy's form (values indexed from 0).
local function first(values)
  if values == nil then return nil end
  return values[0] or values[1]
end

core.register_action("ratelimit_check", { "http-req" }, function(txn, url, failure)
  local headers = {}
  for name, values in pairs(txn.http:req_get_headers()) do
    if not replaced[name] then
      local list = {}
      local i = 0
      while values[i] ~= nil do
        list[#list + 1] = values[i]
        i = i + 1
      end
      headers[name] = list
    end
  end
  local xff = txn.sf:req_fhdr("x-forwarded-for")
  local src = txn.sf:src()
  if xff ~= nil and xff ~= "" then
    headers["x-forwarded-for"] = { xff .. ", " .. src }
  else
    headers["x-forwarded-for"] = { src }
  end
  headers["x-forwarded-method"] = { txn.sf:method() }
  headers["x-forwarded-uri"] = { txn.sf:pathq() }
  headers["x-forwarded-host"] = { txn.sf:req_fhdr("host") or "" }
  headers["x-forwarded-proto"] = { txn.sf:ssl_fc() and "https" or "http" }

  local response = core.httpclient():get({ url = url, headers = headers, timeout = 2000 })
  local status = response and response.status or 503
  if status == 200 or status == 429 then
    txn:set_var("txn.ratelimit_status", status)
    for name, var in pairs(carried) do
      local value = first(response.headers and response.headers[name])
      if value ~= nil then txn:set_var(var, value) end
    end
  elseif failure == "open" then
    txn:set_var("txn.ratelimit_status", 200)
  else
    txn:set_var("txn.ratelimit_status", 503)
  end
end, 2)
