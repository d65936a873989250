/* A PJRT plugin that makes the pinned CPU plugin look like one process of
 * a two-process run, built against the CPU plugin's own pjrt_c_api.h by
 * tests/multi_process.rs. It lets a test drive xlafn's multi-controller
 * path (a global device list, meshes over other processes' devices,
 * arrays holding local blocks only, one argument list per local device)
 * through a real XLA compile and execute on a machine without GPUs.
 *
 * It loads the CPU plugin named by SHIM_REAL_PJRT_PLUGIN and passes every
 * call through, except:
 * - PJRT_Client_Create reads node_id and num_nodes (2 is the only count it
 *   knows), prints the boolean create options to stderr, and makes a CPU
 *   client of 4 devices. Node k drives devices 2k
 *   and 2k+1; the others belong to the other node.
 * - The client's addressable devices, a device's process index and
 *   addressability, and a loaded program's addressable devices follow
 *   that split. The platform is "shim", so xlafn treats it as a plugin
 *   other than the CPU one.
 * - PJRT_LoadedExecutable_Execute takes argument lists for this node's
 *   devices only, as a multi-process plugin does. The other node's
 *   partitions get zero-filled arguments of the same shapes (there is no
 *   other process to supply them), their results are dropped, and this
 *   node's results and completion events are handed back.
 *
 * So a program's local results are what the real run would give if the
 * other process's blocks were zeros, which the test computes by hand.
 *
 * With SHIM_EXECUTE_WAITS_FOR_PEER=k, the k-th execution over both nodes
 * and every later one stand for a collective whose peer never comes:
 * each blocks until
 * PJRT_Client_UpdateGlobalProcessInfo reports the other node not
 * connected, then fails with an ABORTED error of the shim's own, as XLA's
 * GPU client does when it aborts such a collective
 * (abort_collectives_on_failure). */

#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pjrt_c_api.h"

#define NODES 2
#define PER_NODE 2
#define TOTAL (NODES * PER_NODE)

static const PJRT_Api* real;
static PJRT_Api api;
static int node = -1;
static PJRT_Device* local_devices[PER_NODE];

static void die(const char* what) {
  fprintf(stderr, "two_process_shim: %s\n", what);
  abort();
}

static void check(PJRT_Error* e, const char* what) {
  if (e == NULL) return;
  PJRT_Error_Message_Args m = {0};
  m.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  m.error = e;
  real->PJRT_Error_Message(&m);
  fprintf(stderr, "two_process_shim: %s failed: %.*s\n", what,
          (int)m.message_size, m.message);
  abort();
}

static int device_id(PJRT_Device* device) {
  PJRT_Device_GetDescription_Args d = {0};
  d.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  d.device = device;
  check(real->PJRT_Device_GetDescription(&d), "GetDescription");
  PJRT_DeviceDescription_Id_Args id = {0};
  id.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
  id.device_description = d.device_description;
  check(real->PJRT_DeviceDescription_Id(&id), "DeviceDescription_Id");
  return id.id;
}

static int is_local(PJRT_Device* device) {
  return device_id(device) / PER_NODE == node;
}

static long long int_option(const PJRT_Client_Create_Args* args,
                            const char* name) {
  for (size_t i = 0; i < args->num_options; i++) {
    const PJRT_NamedValue* o = &args->create_options[i];
    if (o->type == PJRT_NamedValue_kInt64 && o->name_size == strlen(name) &&
        memcmp(o->name, name, o->name_size) == 0) {
      return (long long)o->int64_value;
    }
  }
  return -1;
}

static PJRT_Error* client_create(PJRT_Client_Create_Args* args) {
  long long id = int_option(args, "node_id");
  if (int_option(args, "num_nodes") != NODES || id < 0 || id >= NODES) {
    die("needs node_id 0 or 1 of num_nodes 2");
  }
  node = (int)id;
  /* Said, so that a test can check what xlafn asked of a CUDA plugin. */
  for (size_t i = 0; i < args->num_options; i++) {
    const PJRT_NamedValue* o = &args->create_options[i];
    if (o->type == PJRT_NamedValue_kBool) {
      fprintf(stderr, "two_process_shim: create option %.*s=%d\n",
              (int)o->name_size, o->name, (int)o->bool_value);
    }
  }
  static const char count_name[] = "cpu_device_count";
  PJRT_NamedValue count = {0};
  count.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  count.name = count_name;
  count.name_size = strlen(count_name);
  count.type = PJRT_NamedValue_kInt64;
  count.int64_value = TOTAL;
  count.value_size = 1;
  PJRT_Client_Create_Args create = {0};
  create.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  create.create_options = &count;
  create.num_options = 1;
  PJRT_Error* e = real->PJRT_Client_Create(&create);
  if (e != NULL) return e;
  args->client = create.client;

  PJRT_Client_AddressableDevices_Args all = {0};
  all.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  all.client = create.client;
  check(real->PJRT_Client_AddressableDevices(&all), "AddressableDevices");
  if (all.num_addressable_devices != TOTAL) die("the CPU client has not 4 devices");
  size_t n = 0;
  for (size_t i = 0; i < TOTAL; i++) {
    if (is_local(all.addressable_devices[i])) {
      local_devices[n++] = all.addressable_devices[i];
    }
  }
  if (n != PER_NODE) die("device ids are not 0..3");
  return NULL;
}

static PJRT_Error* client_addressable_devices(
    PJRT_Client_AddressableDevices_Args* args) {
  args->addressable_devices = local_devices;
  args->num_addressable_devices = PER_NODE;
  return NULL;
}

static PJRT_Error* client_platform_name(PJRT_Client_PlatformName_Args* args) {
  static const char name[] = "shim";
  args->platform_name = name;
  args->platform_name_size = strlen(name);
  return NULL;
}

static PJRT_Error* process_index(
    PJRT_DeviceDescription_ProcessIndex_Args* args) {
  PJRT_DeviceDescription_Id_Args id = {0};
  id.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
  id.device_description = args->device_description;
  PJRT_Error* e = real->PJRT_DeviceDescription_Id(&id);
  if (e != NULL) return e;
  args->process_index = id.id / PER_NODE;
  return NULL;
}

static PJRT_Error* device_is_addressable(PJRT_Device_IsAddressable_Args* args) {
  args->is_addressable = is_local(args->device);
  return NULL;
}

/* A loaded program's devices, all of them in partition order. */
static size_t program_devices(PJRT_LoadedExecutable* exe,
                              PJRT_Device* const** devices) {
  PJRT_LoadedExecutable_AddressableDevices_Args a = {0};
  a.struct_size = PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE;
  a.executable = exe;
  check(real->PJRT_LoadedExecutable_AddressableDevices(&a),
        "LoadedExecutable_AddressableDevices");
  *devices = a.addressable_devices;
  return a.num_addressable_devices;
}

static PJRT_Error* executable_addressable_devices(
    PJRT_LoadedExecutable_AddressableDevices_Args* args) {
  PJRT_Device* const* all;
  size_t n = program_devices(args->executable, &all);
  /* Kept for the program's lifetime: a test makes few programs. */
  PJRT_Device** mine = calloc(n ? n : 1, sizeof *mine);
  if (mine == NULL) die("out of memory");
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (is_local(all[i])) mine[k++] = all[i];
  }
  args->addressable_devices = mine;
  args->num_addressable_devices = k;
  return NULL;
}

static void await_and_destroy(PJRT_Event* event) {
  if (event == NULL) return;
  PJRT_Event_Await_Args w = {0};
  w.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  w.event = event;
  check(real->PJRT_Event_Await(&w), "Event_Await");
  PJRT_Event_Destroy_Args d = {0};
  d.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  d.event = event;
  check(real->PJRT_Event_Destroy(&d), "Event_Destroy");
}

static void destroy_buffer(PJRT_Buffer* buffer) {
  PJRT_Buffer_Destroy_Args d = {0};
  d.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  d.buffer = buffer;
  check(real->PJRT_Buffer_Destroy(&d), "Buffer_Destroy");
}

/* A zero-filled buffer on `device` shaped like `like`. */
static PJRT_Buffer* zeros_like(PJRT_Client* client, PJRT_Buffer* like,
                               PJRT_Device* device) {
  PJRT_Buffer_ElementType_Args t = {0};
  t.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
  t.buffer = like;
  check(real->PJRT_Buffer_ElementType(&t), "Buffer_ElementType");
  PJRT_Buffer_Dimensions_Args dims = {0};
  dims.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  dims.buffer = like;
  check(real->PJRT_Buffer_Dimensions(&dims), "Buffer_Dimensions");
  PJRT_Buffer_OnDeviceSizeInBytes_Args size = {0};
  size.struct_size = PJRT_Buffer_OnDeviceSizeInBytes_Args_STRUCT_SIZE;
  size.buffer = like;
  check(real->PJRT_Buffer_OnDeviceSizeInBytes(&size), "OnDeviceSizeInBytes");
  void* host = calloc(size.on_device_size_in_bytes + 1, 1);
  if (host == NULL) die("out of memory");
  PJRT_Client_BufferFromHostBuffer_Args b = {0};
  b.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  b.client = client;
  b.data = host;
  b.type = t.type;
  b.dims = dims.dims;
  b.num_dims = dims.num_dims;
  b.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  b.device = device;
  check(real->PJRT_Client_BufferFromHostBuffer(&b), "BufferFromHostBuffer");
  await_and_destroy(b.done_with_host_buffer);
  free(host);
  return b.buffer;
}

static PJRT_Client* shim_client;

/* Set once the other node is reported not connected. */
static atomic_int peer_gone;
/* From which execution over both nodes on executions wait (0: never). */
static long execute_waits_for_peer;
static atomic_long executions_over_both;

static PJRT_Error* update_global_process_info(
    PJRT_Client_UpdateGlobalProcessInfo_Args* args) {
  for (size_t i = 0; i < args->num_process_infos; i++) {
    const PJRT_ProcessInfo* info = &args->process_infos[i];
    if (info->task_id != node && info->state != PJRT_ProcessState_kConnected) {
      fprintf(stderr, "two_process_shim: told that process %d is not connected\n",
              info->task_id);
      atomic_store(&peer_gone, 1);
    }
  }
  return NULL;
}

/* The shim's one error of its own; every other error is the real
 * plugin's, and its calls pass through. */
static int shim_error_tag;
#define SHIM_ERROR ((PJRT_Error*)&shim_error_tag)
static const char shim_error_message[] =
    "collective aborted: a process it waited on is not connected";

static void error_destroy(PJRT_Error_Destroy_Args* args) {
  if (args->error != SHIM_ERROR) real->PJRT_Error_Destroy(args);
}

static void error_message(PJRT_Error_Message_Args* args) {
  if (args->error != SHIM_ERROR) {
    real->PJRT_Error_Message(args);
    return;
  }
  args->message = shim_error_message;
  args->message_size = strlen(shim_error_message);
}

static PJRT_Error* error_get_code(PJRT_Error_GetCode_Args* args) {
  if (args->error != SHIM_ERROR) return real->PJRT_Error_GetCode(args);
  args->code = PJRT_Error_Code_ABORTED;
  return NULL;
}

/* Blocks as a collective with a missing peer would, for at most 120 s. */
static PJRT_Error* wait_for_the_peer_to_be_gone(void) {
  const struct timespec tick = {0, 10 * 1000 * 1000};
  for (int i = 0; i < 12000; i++) {
    if (atomic_load(&peer_gone)) return SHIM_ERROR;
    nanosleep(&tick, NULL);
  }
  die("waited 120 s in a collective and nobody reported the peer gone");
  return NULL;
}

static PJRT_Error* execute(PJRT_LoadedExecutable_Execute_Args* args) {
  if (args->execute_device != NULL) return real->PJRT_LoadedExecutable_Execute(args);
  PJRT_Device* const* all;
  size_t n = program_devices(args->executable, &all);
  size_t mine = 0;
  for (size_t i = 0; i < n; i++) mine += (size_t)is_local(all[i]);
  if (args->num_devices != mine || mine == 0) {
    die("execute got another number of argument lists than local devices");
  }
  if (mine < n && execute_waits_for_peer > 0 &&
      atomic_fetch_add(&executions_over_both, 1) + 1 >= execute_waits_for_peer) {
    return wait_for_the_peer_to_be_gone();
  }
  PJRT_Buffer* const** arg_lists = calloc(n, sizeof *arg_lists);
  PJRT_Buffer*** zero_lists = calloc(n, sizeof *zero_lists);
  PJRT_Buffer*** out_lists = calloc(n, sizeof *out_lists);
  PJRT_Event** events = calloc(n, sizeof *events);
  if (!arg_lists || !zero_lists || !out_lists || !events) die("out of memory");
  size_t next = 0;
  size_t num_outputs = 0;
  PJRT_Executable_NumOutputs_Args outs = {0};
  {
    PJRT_LoadedExecutable_GetExecutable_Args g = {0};
    g.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
    g.loaded_executable = args->executable;
    check(real->PJRT_LoadedExecutable_GetExecutable(&g), "GetExecutable");
    outs.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
    outs.executable = g.executable;
    check(real->PJRT_Executable_NumOutputs(&outs), "NumOutputs");
    num_outputs = outs.num_outputs;
    PJRT_Executable_Destroy_Args d = {0};
    d.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
    d.executable = g.executable;
    check(real->PJRT_Executable_Destroy(&d), "Executable_Destroy");
  }
  for (size_t i = 0; i < n; i++) {
    out_lists[i] = calloc(num_outputs + 1, sizeof(PJRT_Buffer*));
    if (out_lists[i] == NULL) die("out of memory");
    if (is_local(all[i])) {
      arg_lists[i] = args->argument_lists[next++];
      continue;
    }
    zero_lists[i] = calloc(args->num_args + 1, sizeof(PJRT_Buffer*));
    if (zero_lists[i] == NULL) die("out of memory");
    for (size_t a = 0; a < args->num_args; a++) {
      zero_lists[i][a] =
          zeros_like(shim_client, args->argument_lists[0][a], all[i]);
    }
    arg_lists[i] = zero_lists[i];
  }
  PJRT_LoadedExecutable_Execute_Args full = *args;
  full.argument_lists = arg_lists;
  full.num_devices = n;
  full.output_lists = out_lists;
  full.device_complete_events = events;
  PJRT_Error* e = real->PJRT_LoadedExecutable_Execute(&full);
  next = 0;
  for (size_t i = 0; i < n; i++) {
    if (is_local(all[i])) {
      if (e == NULL) {
        memcpy(args->output_lists[next], out_lists[i],
               num_outputs * sizeof(PJRT_Buffer*));
        if (args->device_complete_events != NULL) {
          args->device_complete_events[next] = events[i];
        } else {
          await_and_destroy(events[i]);
        }
      }
      next++;
    } else {
      if (e == NULL) {
        await_and_destroy(events[i]);
        for (size_t o = 0; o < num_outputs; o++) destroy_buffer(out_lists[i][o]);
      }
      for (size_t a = 0; a < args->num_args; a++) destroy_buffer(zero_lists[i][a]);
      free(zero_lists[i]);
    }
    free(out_lists[i]);
  }
  free(arg_lists);
  free(zero_lists);
  free(out_lists);
  free(events);
  return e;
}

static PJRT_Error* client_create_and_remember(PJRT_Client_Create_Args* args) {
  PJRT_Error* e = client_create(args);
  if (e == NULL) shim_client = args->client;
  return e;
}

const PJRT_Api* GetPjrtApi(void) {
  if (real != NULL) return &api;
  const char* path = getenv("SHIM_REAL_PJRT_PLUGIN");
  if (path == NULL) die("SHIM_REAL_PJRT_PLUGIN names no plugin");
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) die(dlerror());
  const PJRT_Api* (*get)(void) =
      (const PJRT_Api* (*)(void))dlsym(library, "GetPjrtApi");
  if (get == NULL) die("the real plugin has no GetPjrtApi");
  real = get();
  size_t size = real->struct_size < sizeof api ? real->struct_size : sizeof api;
  memcpy(&api, real, size);
  api.PJRT_Client_Create = client_create_and_remember;
  api.PJRT_Client_AddressableDevices = client_addressable_devices;
  api.PJRT_Client_PlatformName = client_platform_name;
  api.PJRT_DeviceDescription_ProcessIndex = process_index;
  api.PJRT_Device_IsAddressable = device_is_addressable;
  api.PJRT_LoadedExecutable_AddressableDevices = executable_addressable_devices;
  api.PJRT_LoadedExecutable_Execute = execute;
  api.PJRT_Client_UpdateGlobalProcessInfo = update_global_process_info;
  api.PJRT_Error_Destroy = error_destroy;
  api.PJRT_Error_Message = error_message;
  api.PJRT_Error_GetCode = error_get_code;
  const char* waits = getenv("SHIM_EXECUTE_WAITS_FOR_PEER");
  execute_waits_for_peer = waits == NULL ? 0 : strtol(waits, NULL, 10);
  return &api;
}
