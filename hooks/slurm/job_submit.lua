--[[ jobfit job_submit.lua: right-sizing advice inside slurmctld (Slurm job_submit/lua plugin).

Install: see docs/hooks.md (slurm.conf `JobSubmitPlugins=lua`; this file as job_submit.lua beside
slurm.conf). It reads the local cache written by `jobfit hooks export --cluster C --out FILE` — never the
network — and, for the submitting user and the job's script:
  * advisory (default): tells the user the recommended --mem / --time / CPUs / GPU with slurm.log_user;
  * enforcing (only users or partitions listed below): lowers the requested memory per node and time
    limit to the recommendation. A request is never raised, never lowered below the recommendation,
    and fields the user did not set are left alone.
Every entry point runs its work under pcall and returns slurm.SUCCESS whatever happens (a missing,
stale or corrupt cache, an odd job description): jobfit can never reject or delay a job.

Cache lookup key: the user plus, in order, the sha256 of the batch script (jobfit's silver.scripts
key, computed here in plain Lua), the job name (jobfit's key for jobs without a script), then `*` (any
script of that user). Users without an entry (too little history) get nothing.
]]

-- Settings: edit here. (A global table so that tests can point it elsewhere.)
JOBFIT_SUBMIT = {
    -- The file `jobfit hooks export --out` writes (readable by SlurmUser).
    cache_path = "/var/lib/jobfit/slurm-cache.tsv",
    -- Opt-in enforcement: users (by name) and partitions (every partition the job lists) that agreed.
    enforce_users = {
        -- ["alice"] = true,
    },
    enforce_partitions = {
        -- ["preempt"] = true,
    },
    -- Seconds between checks whether the cache file changed (0: on every submission).
    recheck_s = 10,
    -- Scripts longer than this are not hashed (the job name and `*` keys still apply).
    max_script_bytes = 262144,
}

local MAGIC = "jobfit-hooks-cache\t1"
local NO_VAL = 0xfffffffe -- slurm's NO_VAL; INFINITE is 0xffffffff: both mean "not a number to lower"

-- sha256 (FIPS 180-4) on Lua 5.4's 64-bit integers; hex digest of the bytes of `msg`.
local K = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}
local M32 = 0xffffffff

local function rrot(x, n)
    return ((x >> n) | (x << (32 - n))) & M32
end

local function sha256(msg)
    local h = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 }
    local len = #msg
    msg = msg .. "\128" .. string.rep("\0", (55 - len) % 64) .. string.pack(">I8", len * 8)
    local w = {}
    for chunk = 1, #msg, 64 do
        for i = 1, 16 do
            w[i] = string.unpack(">I4", msg, chunk + (i - 1) * 4)
        end
        for i = 17, 64 do
            local s0 = rrot(w[i - 15], 7) ~ rrot(w[i - 15], 18) ~ (w[i - 15] >> 3)
            local s1 = rrot(w[i - 2], 17) ~ rrot(w[i - 2], 19) ~ (w[i - 2] >> 10)
            w[i] = (w[i - 16] + s0 + w[i - 7] + s1) & M32
        end
        local a, b, c, d, e, f, g, hh = h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8]
        for i = 1, 64 do
            local t1 = (hh + (rrot(e, 6) ~ rrot(e, 11) ~ rrot(e, 25)) + ((e & f) ~ (~e & g)) + K[i] + w[i]) & M32
            local t2 = ((rrot(a, 2) ~ rrot(a, 13) ~ rrot(a, 22)) + ((a & b) ~ (a & c) ~ (b & c))) & M32
            hh, g, f, e, d, c, b, a = g, f, e, (d + t1) & M32, c, b, a, (t1 + t2) & M32
        end
        h[1], h[2], h[3], h[4] = (h[1] + a) & M32, (h[2] + b) & M32, (h[3] + c) & M32, (h[4] + d) & M32
        h[5], h[6], h[7], h[8] = (h[5] + e) & M32, (h[6] + f) & M32, (h[7] + g) & M32, (h[8] + hh) & M32
    end
    return string.format(string.rep("%08x", 8), table.unpack(h))
end
JOBFIT_SUBMIT.sha256 = sha256

-- The in-memory cache: entries[user][key] = {mem_mb=, time_min=, cpus=, gres=}; token = what identified
-- the file when it was read (its size and first bytes, which carry `made_at`: Lua has no stat/mtime).
local state = { token = nil, entries = nil, checked_at = nil }

local function num(field)
    if field == "-" then
        return nil
    end
    return math.tointeger(tonumber(field))
end

local function parse(text)
    local entries, first = {}, true
    for line in string.gmatch(text, "([^\n]*)\n?") do
        if first then
            if line ~= MAGIC then
                return nil
            end
            first = false
        elseif line ~= "" and string.sub(line, 1, 1) ~= "#" then
            local f = {}
            for field in string.gmatch(line, "([^\t]*)\t?") do
                f[#f + 1] = field
            end
            if #f >= 6 and f[1] ~= "" and f[2] ~= "" then
                entries[f[1]] = entries[f[1]] or {}
                entries[f[1]][f[2]] = {
                    mem_mb = num(f[3]), time_min = num(f[4]), cpus = num(f[5]),
                    gres = (f[6] ~= "-" and f[6] ~= "") and f[6] or nil,
                }
            end
        end
    end
    if first then
        return nil
    end
    return entries
end

-- The cache, re-read when the file changed; nil when missing or not a jobfit cache.
local function load_cache()
    local now = os.time()
    if state.checked_at and now - state.checked_at < JOBFIT_SUBMIT.recheck_s then
        return state.entries
    end
    state.checked_at = now
    local fh = io.open(JOBFIT_SUBMIT.cache_path, "rb")
    if not fh then
        state.token, state.entries = nil, nil
        return nil
    end
    local size = fh:seek("end")
    fh:seek("set", 0)
    local head = fh:read(512) or ""
    local token = tostring(size) .. "\0" .. head
    if token ~= state.token then
        fh:seek("set", 0)
        state.entries = parse(fh:read("a") or "")
        state.token = token
        if state.entries == nil then
            slurm.log_info("jobfit: %s is not a jobfit cache; no advice", JOBFIT_SUBMIT.cache_path)
        end
    end
    fh:close()
    return state.entries
end

local function is_set(value)
    return type(value) == "number" and value > 0 and value < NO_VAL
end

local function lookup(entries, job_desc)
    local user = job_desc.user_name
    local mine = user and entries[user]
    if not mine then
        return nil
    end
    local script = job_desc.script
    if type(script) == "string" and #script > 0 and #script <= JOBFIT_SUBMIT.max_script_bytes then
        local hit = mine[sha256(script)]
        if hit then
            return hit, "script"
        end
    end
    if type(job_desc.name) == "string" and mine[job_desc.name] then
        return mine[job_desc.name], "job name"
    end
    return mine["*"], "your jobs"
end

local function enforced(job_desc)
    if job_desc.user_name and JOBFIT_SUBMIT.enforce_users[job_desc.user_name] then
        return true
    end
    if type(job_desc.partition) ~= "string" or job_desc.partition == "" then
        return false
    end
    for part in string.gmatch(job_desc.partition, "[^,]+") do
        if not JOBFIT_SUBMIT.enforce_partitions[part] then
            return false
        end
    end
    return true
end

local function advise(job_desc)
    local entries = load_cache()
    if not entries then
        return
    end
    local rec, basis = lookup(entries, job_desc)
    if not rec then
        return
    end
    local enforce = enforced(job_desc)
    local said, changed = {}, {}
    local mem = job_desc.min_mem_per_node
    if rec.mem_mb then
        if is_set(mem) and rec.mem_mb < mem then
            if enforce then
                job_desc.min_mem_per_node = rec.mem_mb
                changed[#changed + 1] = string.format("--mem %dM -> %dM", mem, rec.mem_mb)
            else
                said[#said + 1] = string.format("--mem=%dM (you asked %dM)", rec.mem_mb, mem)
            end
        elseif not is_set(mem) and not is_set(job_desc.min_mem_per_cpu) then
            said[#said + 1] = string.format("--mem=%dM", rec.mem_mb)
        end
    end
    local limit = job_desc.time_limit
    if rec.time_min then
        if is_set(limit) and rec.time_min < limit then
            local floor = is_set(job_desc.time_min) and math.max(rec.time_min, job_desc.time_min) or rec.time_min
            if enforce and floor < limit then
                job_desc.time_limit = floor
                changed[#changed + 1] = string.format("--time %d -> %d min", limit, floor)
            elseif not enforce then
                said[#said + 1] = string.format("--time=%d (minutes; you asked %d)", rec.time_min, limit)
            end
        elseif not is_set(limit) then
            said[#said + 1] = string.format("--time=%d (minutes)", rec.time_min)
        end
    end
    if rec.cpus then
        local asked = (is_set(job_desc.cpus_per_task) and job_desc.cpus_per_task or 1)
            * (is_set(job_desc.num_tasks) and job_desc.num_tasks or 1)
        if rec.cpus < asked then
            said[#said + 1] = string.format("%d CPUs in all (you asked %d)", rec.cpus, asked)
        end
    end
    if rec.gres then
        said[#said + 1] = "--gres=" .. rec.gres
    end
    if #changed > 0 then
        slurm.log_user("jobfit: set to what %s needed: %s", basis, table.concat(changed, ", "))
    end
    if #said > 0 then
        slurm.log_user("jobfit advice (from %s): %s", basis, table.concat(said, " "))
    end
end

local function safely(job_desc)
    local ok, err = pcall(advise, job_desc)
    if not ok then
        pcall(slurm.log_info, "jobfit: job_submit advice skipped: %s", tostring(err))
    end
    return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    return safely(job_desc)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    -- A modification only lowers what the user asked for again; the same rules, the same guarantees.
    return safely(job_desc)
end

return slurm.SUCCESS
