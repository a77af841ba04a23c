--- venom.metrics — a log of training metrics, one record per line, in CSV
-- or JSON Lines (exported as venom.util.MetricsLog):
--
--     local log = venom.util.MetricsLog("run.csv")        -- or "run.jsonl"
--     log:write{step = 100, loss = 0.43, lr = 1e-3}
--     log:write{epoch = 1, test_accuracy = 86.2}
--     log:close()
--     venom.plot.curves("run.png", log.records, {...})    -- see venom.plot
--
-- Values are numbers (written with the fewest digits that read back as the
-- same double, 17 at most; NaN and ±inf as nan/inf in CSV and null in JSON, which has
-- no such numbers), strings or booleans. CSV: the header is the union of
-- keys of the first record, or opts.columns; a later record with a key
-- not in the header is an error naming it, and a missing key is an empty
-- cell. JSON Lines: one object per line, keys sorted. Each line is flushed
-- as it is written, so a run that is killed keeps its log up to the last
-- record. Every record stays in log.records for plotting.
local metrics = {}

local Log = {}
Log.__index = Log

local util = require "venom.util"
local function fail(msg) util.fail("MetricsLog: " .. msg) end

local sorted_keys = util.sorted_keys

local function number_text(v, json)
  if v ~= v then return json and "null" or "nan" end
  if v == math.huge then return json and "null" or "inf" end
  if v == -math.huge then return json and "null" or "-inf" end
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return ("%d"):format(v) end
  -- The shortest text that reads back as the same double (0.1, not
  -- 0.10000000000000001); 17 digits always do.
  for digits = 15, 16 do
    local t = ("%." .. digits .. "g"):format(v)
    if tonumber(t) == v then return t end
  end
  return ("%.17g"):format(v)
end

local json_escapes = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
                       ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }

local function json_value(v)
  if type(v) == "number" then return number_text(v, true) end
  if type(v) == "boolean" then return tostring(v) end
  return '"' .. v:gsub('[%c"\\]', function(c)
    return json_escapes[c] or ("\\u%04x"):format(c:byte())
  end) .. '"'
end

-- RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled.
local function csv_value(v)
  if v == nil then return "" end
  if type(v) == "number" then return number_text(v, false) end
  v = tostring(v)
  if v:find('[,"\r\n]') then return '"' .. v:gsub('"', '""') .. '"' end
  return v
end

--- metrics.open(path, opts) → log. The format follows the extension: .csv,
-- or .jsonl / .json (JSON Lines). opts.columns: the CSV header (a list of
-- keys), else the first record's keys in sorted order. Errors: another
-- extension, a file that cannot be created (the system's reason).
function metrics.open(path, opts)
  opts = opts or {}
  if type(path) ~= "string" then fail("expected a file path (a string), got a " .. type(path)) end
  local ext = (path:match("%.(%w+)$") or ""):lower()
  local format = ext == "csv" and "csv" or (ext == "jsonl" or ext == "json") and "jsonl" or nil
  if not format then fail(("%s: expected a file name ending in .csv, .jsonl or .json"):format(path)) end
  if opts.columns ~= nil and (type(opts.columns) ~= "table" or #opts.columns == 0) then
    fail("opts.columns: expected a list of keys")
  end
  local f, err = io.open(path, "w")
  if not f then fail("cannot create " .. err) end
  f:setvbuf("line")
  return setmetatable({ path = path, format = format, file = f, columns = opts.columns,
                        records = {} }, Log)
end

--- log:write(record): appends one record (a table of string keys to
-- numbers, strings or booleans). Errors: a closed log, a value of another
-- type, a CSV key outside the header.
function Log:write(record)
  if not self.file then fail(self.path .. " is closed") end
  if type(record) ~= "table" then fail("write: expected a table of values, got a " .. type(record)) end
  for k, v in pairs(record) do
    local tv = type(v)
    if type(k) ~= "string" or not (tv == "number" or tv == "string" or tv == "boolean") then
      fail(("write: %s = %s: expected string keys and number, string or boolean values")
        :format(tostring(k), tostring(v)))
    end
  end
  local line
  if self.format == "jsonl" then
    local parts = {}
    for _, k in ipairs(sorted_keys(record)) do parts[#parts + 1] = json_value(k) .. ":" .. json_value(record[k]) end
    line = "{" .. table.concat(parts, ",") .. "}"
  else
    if not self.columns then self.columns = sorted_keys(record) end
    if not self.header_written then
      local head = {}
      for i, k in ipairs(self.columns) do head[i] = csv_value(k) end
      self.file:write(table.concat(head, ","), "\n")
      self.header_written = true
      self.known = {}
      for _, k in ipairs(self.columns) do self.known[k] = true end
    end
    for k in pairs(record) do
      if not self.known[k] then
        fail(("write: %s has no column %q (columns: %s); list every key in opts.columns")
          :format(self.path, k, table.concat(self.columns, ", ")))
      end
    end
    local cells = {}
    for i, k in ipairs(self.columns) do cells[i] = csv_value(record[k]) end
    line = table.concat(cells, ",")
  end
  self.file:write(line, "\n")
  local copy = {}
  for k, v in pairs(record) do copy[k] = v end
  self.records[#self.records + 1] = copy
end

--- log:close(): closes the file (idempotent); log.records stays readable.
function Log:close()
  if self.file then self.file:close() end
  self.file = nil
end

return metrics
