//! A restricted unpickler for PyTorch's `data.pkl`: the pickle inside a
//! `torch.save` archive. It builds only what a state dict is made of
//! (dicts, lists, tuples, strings, numbers and tensor records pointing at
//! the archive's storages) and calls only the few constructors a state
//! dict names (`OrderedDict`, `torch._utils._rebuild_tensor_v2`,
//! `_rebuild_parameter`, the typed storages): any other global is an
//! error, so no code a file names ever runs. The file is untrusted: its
//! size, the stack, the memo, the nesting depth and the copying work are
//! all bounded, and every malformed opcode is an error naming its offset.
//!
//! Layer: part of `weights`. Imports `dtype` and `error`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use std::rc::Rc;

/// The largest `data.pkl` read: a state dict's pickle holds names and
/// shapes, kilobytes per tensor.
pub(crate) const MAX_PICKLE_BYTES: u64 = 64 << 20;
/// The deepest nesting of containers accepted (a state dict is two or
/// three deep; dropping and walking values recurses this deep).
const MAX_DEPTH: u32 = 64;
/// The most values on the stack, entries in the memo, and elements
/// copied when a shared container is changed.
const MAX_STACK: usize = 1 << 20;
const MAX_MEMO: usize = 1 << 22;
const MAX_COPIED: usize = 1 << 26;
/// The largest tensor rank accepted.
const MAX_RANK: usize = 16;

/// A tensor as the pickle describes it: a view of a storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TensorRecord {
    /// The storage's archive key (`data/<key>`).
    pub key: String,
    pub dtype: DType,
    /// The storage's element count, as the pickle states it.
    pub storage_len: u64,
    pub offset: u64,
    pub dims: Vec<i64>,
    pub strides: Vec<i64>,
}

/// What the unpickler may construct.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    Tuple(Rc<Vec<Value>>, u32),
    List(Rc<Vec<Value>>, u32),
    Dict(Rc<Vec<(Value, Value)>>, u32),
    /// A callable the pickle named, from the allowed list.
    Global(Global),
    /// A persistent id resolved to a storage: dtype, key, element count.
    Storage(DType, Rc<str>, u64),
    Tensor(Rc<TensorRecord>),
}

/// The globals a state dict names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Global {
    OrderedDict,
    RebuildTensor,
    RebuildParameter,
    Storage(DType),
}

impl Value {
    fn depth(&self) -> u32 {
        match self {
            Value::Tuple(_, d) | Value::List(_, d) | Value::Dict(_, d) => *d,
            _ => 0,
        }
    }
}

/// The depth of a container holding `items`.
fn depth_of<'a>(items: impl IntoIterator<Item = &'a Value>) -> Result<u32> {
    let d = 1 + items.into_iter().map(Value::depth).max().unwrap_or(0);
    match d <= MAX_DEPTH {
        true => Ok(d),
        false => Err(bad(format!("containers nested deeper than {MAX_DEPTH}"))),
    }
}

fn bad(message: String) -> Error {
    Error::invalid("weights", format!("torch file: {message}"))
}

/// Resolves a `GLOBAL` against the allowed list.
fn global(module: &str, name: &str) -> Result<Global> {
    let storage = |d| Ok(Global::Storage(d));
    match (module, name) {
        ("collections", "OrderedDict") => Ok(Global::OrderedDict),
        ("torch._utils", "_rebuild_tensor_v2") => Ok(Global::RebuildTensor),
        ("torch._utils", "_rebuild_parameter") => Ok(Global::RebuildParameter),
        ("torch", "FloatStorage") => storage(DType::F32),
        ("torch", "DoubleStorage") => storage(DType::F64),
        ("torch", "HalfStorage") => storage(DType::F16),
        ("torch", "BFloat16Storage") => storage(DType::BF16),
        ("torch", "LongStorage") => storage(DType::I64),
        ("torch", "IntStorage") => storage(DType::I32),
        ("torch", "ShortStorage") => storage(DType::I16),
        ("torch", "CharStorage") => storage(DType::I8),
        ("torch", "ByteStorage") => storage(DType::U8),
        ("torch", "BoolStorage") => storage(DType::Bool),
        _ => Err(bad(format!(
            "the pickle names {module}.{name}, which a state dict of tensors does not need; \
             xlafn builds only dicts, lists, numbers, strings and tensors (no code from the \
             file runs)"
        ))),
    }
}

/// Reads the pickle `bytes` into the one value it holds.
pub(crate) fn unpickle(bytes: &[u8]) -> Result<Value> {
    Machine {
        bytes,
        at: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Vec::new(),
        copied: 0,
    }
    .run()
}

struct Machine<'a> {
    bytes: &'a [u8],
    at: usize,
    stack: Vec<Value>,
    /// Stack heights at each `MARK`.
    marks: Vec<usize>,
    memo: Vec<Option<Value>>,
    copied: usize,
}

impl Machine<'_> {
    fn run(mut self) -> Result<Value> {
        loop {
            let at = self.at;
            let op = self.take(1)?[0];
            self.step(op).map_err(|e| match e {
                Error::InvalidArgument { message, .. } => Error::invalid(
                    "weights",
                    format!("{message} (opcode 0x{op:02x} at byte {at} of data.pkl)"),
                ),
                other => other,
            })?;
            if op == b'.' {
                return match (self.stack.pop(), self.stack.is_empty()) {
                    (Some(v), true) => Ok(v),
                    _ => Err(bad("the pickle does not end with exactly one value".into())),
                };
            }
            if self.stack.len() > MAX_STACK {
                return Err(bad(format!("more than {MAX_STACK} values on the stack")));
            }
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let out = &self.bytes[self.at..end];
                self.at = end;
                Ok(out)
            }
            None => Err(bad("the pickle ends inside an opcode".into())),
        }
    }

    fn u32_le(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64_le(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn len_prefixed(&mut self, n: u64) -> Result<&[u8]> {
        let n = usize::try_from(n).map_err(|_| bad("a length beyond memory".into()))?;
        self.take(n)
    }

    fn line(&mut self) -> Result<String> {
        let rest = &self.bytes[self.at..];
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| bad("a GLOBAL without its newline".into()))?;
        let text = std::str::from_utf8(&rest[..end])
            .map_err(|_| bad("a GLOBAL name that is not UTF-8".into()))?
            .to_string();
        self.at += end + 1;
        Ok(text)
    }

    fn text(bytes: &[u8]) -> Result<Value> {
        let s = std::str::from_utf8(bytes).map_err(|_| bad("a string that is not UTF-8".into()))?;
        Ok(Value::Str(Rc::from(s)))
    }

    fn pop(&mut self) -> Result<Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(bad("an opcode takes a value from an empty stack".into()));
        }
        Ok(self.stack.pop().expect("checked above"))
    }

    fn top(&mut self) -> Result<&mut Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(bad("an opcode needs a value on an empty stack".into()));
        }
        Ok(self.stack.last_mut().expect("checked above"))
    }

    /// The values since the last `MARK`, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Value>> {
        let mark = self
            .marks
            .pop()
            .ok_or_else(|| bad("an opcode needs a MARK that is not there".into()))?;
        Ok(self.stack.split_off(mark))
    }

    fn tuple(&mut self, items: Vec<Value>) -> Result<()> {
        let d = depth_of(&items)?;
        self.stack.push(Value::Tuple(Rc::new(items), d));
        Ok(())
    }

    fn memo_put(&mut self, index: usize) -> Result<()> {
        if index >= MAX_MEMO {
            return Err(bad(format!("a memo index over {MAX_MEMO}")));
        }
        let value = self.top()?.clone();
        if self.memo.len() <= index {
            self.memo.resize(index + 1, None);
        }
        self.memo[index] = Some(value);
        Ok(())
    }

    fn memo_get(&mut self, index: usize) -> Result<()> {
        let value = self
            .memo
            .get(index)
            .cloned()
            .flatten()
            .ok_or_else(|| bad(format!("memo entry {index} read before it is written")))?;
        self.stack.push(value);
        Ok(())
    }

    /// Counts the elements a copy-on-write of a shared container copies.
    fn charge(&mut self, shared: bool, len: usize) -> Result<()> {
        if shared {
            self.copied = self.copied.saturating_add(len);
            if self.copied > MAX_COPIED {
                return Err(bad("too much copying of shared containers".into()));
            }
        }
        Ok(())
    }

    fn append(&mut self, items: Vec<Value>) -> Result<()> {
        let d = depth_of(&items)?;
        let (shared, len) = match self.top()? {
            Value::List(list, _) => (Rc::strong_count(list) > 1, list.len()),
            _ => return Err(bad("APPEND to something that is not a list".into())),
        };
        self.charge(shared, len)?;
        if let Value::List(list, depth) = self.top()? {
            *depth = (*depth).max(d);
            Rc::make_mut(list).extend(items);
        }
        Ok(())
    }

    fn set_items(&mut self, items: Vec<Value>) -> Result<()> {
        if !items.len().is_multiple_of(2) {
            return Err(bad("SETITEMS with a key and no value".into()));
        }
        let d = depth_of(&items)?;
        let (shared, len) = match self.top()? {
            Value::Dict(dict, _) => (Rc::strong_count(dict) > 1, dict.len()),
            _ => return Err(bad("SETITEM on something that is not a dict".into())),
        };
        self.charge(shared, len)?;
        if let Value::Dict(dict, depth) = self.top()? {
            *depth = (*depth).max(d);
            let dict = Rc::make_mut(dict);
            let mut items = items.into_iter();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                match dict.iter_mut().find(|(key, _)| *key == k) {
                    Some(entry) => entry.1 = v,
                    None => dict.push((k, v)),
                }
            }
        }
        Ok(())
    }

    fn step(&mut self, op: u8) -> Result<()> {
        match op {
            0x80 => {
                let proto = self.take(1)?[0];
                if proto > 5 {
                    return Err(bad(format!("pickle protocol {proto}")));
                }
            }
            0x95 => {
                self.u64_le()?;
            }
            b'(' => self.marks.push(self.stack.len()),
            b'}' => self.stack.push(Value::Dict(Rc::new(Vec::new()), 1)),
            b']' => self.stack.push(Value::List(Rc::new(Vec::new()), 1)),
            b')' => self.tuple(Vec::new())?,
            b'N' => self.stack.push(Value::None),
            0x88 => self.stack.push(Value::Bool(true)),
            0x89 => self.stack.push(Value::Bool(false)),
            b'K' => {
                let v = self.take(1)?[0];
                self.stack.push(Value::Int(v.into()));
            }
            b'M' => {
                let v = u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes"));
                self.stack.push(Value::Int(v.into()));
            }
            b'J' => {
                let v = i32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes"));
                self.stack.push(Value::Int(v.into()));
            }
            0x8a => {
                let n = self.take(1)?[0] as usize;
                let digits = self.take(n)?;
                if n > 8 {
                    return Err(bad(format!("an integer of {n} bytes")));
                }
                let mut v: i64 = 0;
                for (i, &b) in digits.iter().enumerate() {
                    v |= i64::from(b) << (8 * i);
                }
                if n > 0 && n < 8 && digits[n - 1] & 0x80 != 0 {
                    v -= 1i64 << (8 * n);
                }
                self.stack.push(Value::Int(v));
            }
            b'G' => {
                let v = f64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes"));
                self.stack.push(Value::Float(v));
            }
            b'X' => {
                let n = self.u32_le()?;
                let v = Self::text(self.len_prefixed(n.into())?)?;
                self.stack.push(v);
            }
            0x8c => {
                let n = self.take(1)?[0];
                let v = Self::text(self.len_prefixed(n.into())?)?;
                self.stack.push(v);
            }
            0x8d => {
                let n = self.u64_le()?;
                let v = Self::text(self.len_prefixed(n)?)?;
                self.stack.push(v);
            }
            b'C' => {
                let n = self.take(1)?[0];
                let v = Value::Bytes(Rc::from(self.len_prefixed(n.into())?));
                self.stack.push(v);
            }
            b'B' => {
                let n = self.u32_le()?;
                let v = Value::Bytes(Rc::from(self.len_prefixed(n.into())?));
                self.stack.push(v);
            }
            b'q' => {
                let i = self.take(1)?[0];
                self.memo_put(i.into())?;
            }
            b'r' => {
                let i = self.u32_le()?;
                self.memo_put(i as usize)?;
            }
            0x94 => {
                let i = self.memo.len();
                self.memo_put(i)?;
            }
            b'h' => {
                let i = self.take(1)?[0];
                self.memo_get(i.into())?;
            }
            b'j' => {
                let i = self.u32_le()?;
                self.memo_get(i as usize)?;
            }
            b'c' => {
                let module = self.line()?;
                let name = self.line()?;
                self.stack.push(Value::Global(global(&module, &name)?));
            }
            0x93 => {
                let name = self.pop()?;
                let module = self.pop()?;
                match (module, name) {
                    (Value::Str(m), Value::Str(n)) => {
                        self.stack.push(Value::Global(global(&m, &n)?))
                    }
                    _ => return Err(bad("STACK_GLOBAL of values that are not names".into())),
                }
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                let floor = self.marks.last().copied().unwrap_or(0);
                if self.stack.len() < floor + n {
                    return Err(bad("a TUPLE of more values than the stack holds".into()));
                }
                let items = self.stack.split_off(self.stack.len() - n);
                self.tuple(items)?;
            }
            b't' => {
                let items = self.pop_mark()?;
                self.tuple(items)?;
            }
            b'a' => {
                let v = self.pop()?;
                self.append(vec![v])?;
            }
            b'e' => {
                let items = self.pop_mark()?;
                self.append(items)?;
            }
            b's' => {
                let v = self.pop()?;
                let k = self.pop()?;
                self.set_items(vec![k, v])?;
            }
            b'u' => {
                let items = self.pop_mark()?;
                self.set_items(items)?;
            }
            b'Q' => {
                let pid = self.pop()?;
                self.stack.push(persistent(&pid)?);
            }
            b'R' => {
                let args = self.pop()?;
                let callable = self.pop()?;
                self.stack.push(reduce(&callable, &args)?);
            }
            b'b' => {
                // An object's state (an OrderedDict's `_metadata`): kept
                // nowhere, since xlafn reads only the entries.
                self.pop()?;
                self.top()?;
            }
            b'.' => {}
            other => {
                return Err(bad(format!(
                    "opcode 0x{other:02x}, which a state dict's pickle does not use"
                )));
            }
        }
        Ok(())
    }
}

/// A persistent id: `('storage', <storage type>, key, location, numel)`.
fn persistent(pid: &Value) -> Result<Value> {
    let Value::Tuple(items, _) = pid else {
        return Err(bad("a persistent id that is not a tuple".into()));
    };
    match items.as_slice() {
        [
            Value::Str(kind),
            Value::Global(Global::Storage(dtype)),
            Value::Str(key),
            _,
            Value::Int(n),
        ] if &**kind == "storage" && *n >= 0 => Ok(Value::Storage(*dtype, key.clone(), *n as u64)),
        _ => Err(bad(
            "a persistent id other than ('storage', type, key, location, size)".into(),
        )),
    }
}

fn ints(v: &Value, what: &str) -> Result<Vec<i64>> {
    match v {
        Value::Tuple(items, _) if items.len() <= MAX_RANK => items
            .iter()
            .map(|i| match i {
                Value::Int(n) if *n >= 0 => Ok(*n),
                _ => Err(bad(format!(
                    "a tensor's {what} holds something other than a size"
                ))),
            })
            .collect(),
        _ => Err(bad(format!(
            "a tensor's {what} is not a tuple of at most {MAX_RANK}"
        ))),
    }
}

/// Calls an allowed constructor.
fn reduce(callable: &Value, args: &Value) -> Result<Value> {
    let Value::Tuple(args, _) = args else {
        return Err(bad("REDUCE arguments that are not a tuple".into()));
    };
    match (callable, args.as_slice()) {
        (Value::Global(Global::OrderedDict), []) => Ok(Value::Dict(Rc::new(Vec::new()), 1)),
        (Value::Global(Global::RebuildTensor), [storage, offset, size, stride, _, _, ..]) => {
            let Value::Storage(dtype, key, storage_len) = storage else {
                return Err(bad(
                    "a tensor rebuilt from something other than a storage".into()
                ));
            };
            let Value::Int(offset) = offset else {
                return Err(bad("a tensor's storage offset is not an integer".into()));
            };
            let (dims, strides) = (ints(size, "size")?, ints(stride, "stride")?);
            if dims.len() != strides.len() || *offset < 0 {
                return Err(bad("a tensor whose size and stride disagree".into()));
            }
            Ok(Value::Tensor(Rc::new(TensorRecord {
                key: key.to_string(),
                dtype: *dtype,
                storage_len: *storage_len,
                offset: *offset as u64,
                dims,
                strides,
            })))
        }
        (Value::Global(Global::RebuildParameter), [tensor @ Value::Tensor(_), ..]) => {
            Ok(tensor.clone())
        }
        (Value::Global(g), _) => Err(bad(format!("{g:?} called with arguments it does not take"))),
        _ => Err(bad(
            "REDUCE of something that is not an allowed constructor".into(),
        )),
    }
}

/// The tensors of an unpickled state dict, by name: a dict's entries
/// whose values are tensors, nested dicts flattened with `.` (a
/// checkpoint's `{"model": state_dict, ...}` gives `model.conv.weight`);
/// other values (an epoch count, an optimizer's numbers) are left out.
pub(crate) fn tensors(value: &Value) -> Result<Vec<(String, Rc<TensorRecord>)>> {
    let mut out = Vec::new();
    match value {
        Value::Dict(..) => collect("", value, &mut out)?,
        _ => {
            return Err(bad(
                "the pickle holds no dict of tensors (a state dict)".into()
            ));
        }
    }
    Ok(out)
}

fn collect(prefix: &str, value: &Value, out: &mut Vec<(String, Rc<TensorRecord>)>) -> Result<()> {
    match value {
        Value::Tensor(t) => out.push((prefix.to_string(), t.clone())),
        Value::Dict(entries, _) => {
            for (k, v) in entries.iter() {
                let key = match k {
                    Value::Str(s) => s.to_string(),
                    Value::Int(n) => n.to_string(),
                    _ => continue,
                };
                let name = match prefix.is_empty() {
                    true => key,
                    false => format!("{prefix}.{key}"),
                };
                collect(&name, v, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pickle by hand: `{'w': _rebuild_tensor_v2(storage('0', 6 floats),
    /// 0, (2, 3), (3, 1), False, OrderedDict())}`.
    fn state_dict_pickle() -> Vec<u8> {
        let mut p = vec![0x80, 2, b'}', b'(', b'X', 1, 0, 0, 0, b'w'];
        p.extend(b"ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage");
        p.extend(b"ctorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x06tQ");
        p.extend(b"K\x00K\x02K\x03\x86K\x03K\x01\x86\x89ccollections\nOrderedDict\n)Rt");
        p.extend(b"Ru.");
        p
    }

    #[test]
    fn a_state_dict_pickle_gives_its_tensor_records() {
        let value = unpickle(&state_dict_pickle()).unwrap();
        let tensors = tensors(&value).unwrap();
        assert_eq!(tensors.len(), 1);
        let (name, t) = &tensors[0];
        assert_eq!(name, "w");
        assert_eq!(
            (t.key.as_str(), t.dtype, t.storage_len),
            ("0", DType::F32, 6)
        );
        assert_eq!(
            (t.dims.clone(), t.strides.clone()),
            (vec![2, 3], vec![3, 1])
        );
    }

    #[test]
    fn code_and_malformed_pickles_are_refused() {
        // `os.system('true')`: a global outside the list.
        let e = unpickle(b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00true\x85R.").unwrap_err();
        assert!(e.to_string().contains("os.system"), "{e}");
        // Every cut of a valid pickle is an error, never a panic.
        let p = state_dict_pickle();
        for n in 0..p.len() {
            assert!(unpickle(&p[..n]).is_err(), "cut at {n}");
        }
        // Nesting past the bound.
        let mut deep = vec![0x80, 2];
        deep.extend(std::iter::repeat_n(b']', 1)); // a list
        deep.extend(std::iter::repeat_n(0x85, 100)); // tuples of tuples
        deep.push(b'.');
        assert!(unpickle(&deep).unwrap_err().to_string().contains("nested"));
        // A memo read before its write; an unknown opcode.
        assert!(unpickle(b"\x80\x02h\x05.").is_err());
        assert!(unpickle(b"\x80\x02\xff.").is_err());
    }
}
