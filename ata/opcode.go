package ata

// Opcode is the value written to the command register. Each command the
// device knows has a constant below; opcodes are from ACS-3 §7 and Linux
// include/linux/ata.h.
type Opcode uint8

// Commands the device implements.
const (
	CmdNOP                      Opcode = 0x00
	CmdDataSetManagement        Opcode = 0x06
	CmdRecalibrate              Opcode = 0x10
	CmdReadSectors              Opcode = 0x20
	CmdReadSectorsNoRetry       Opcode = 0x21
	CmdReadSectorsExt           Opcode = 0x24
	CmdReadDMAExt               Opcode = 0x25
	CmdReadNativeMaxAddressExt  Opcode = 0x27
	CmdReadMultipleExt          Opcode = 0x29
	CmdWriteSectors             Opcode = 0x30
	CmdWriteSectorsNoRetry      Opcode = 0x31
	CmdWriteSectorsExt          Opcode = 0x34
	CmdWriteDMAExt              Opcode = 0x35
	CmdWriteMultipleExt         Opcode = 0x39
	CmdWriteDMAFUAExt           Opcode = 0x3D
	CmdReadVerifySectors        Opcode = 0x40
	CmdReadVerifySectorsNoRetry Opcode = 0x41
	CmdReadVerifySectorsExt     Opcode = 0x42
	CmdSeek                     Opcode = 0x70
	CmdExecuteDeviceDiagnostic  Opcode = 0x90
	CmdInitializeDeviceParams   Opcode = 0x91
	CmdCheckPowerModeAlt        Opcode = 0x98
	CmdReadMultiple             Opcode = 0xC4
	CmdWriteMultiple            Opcode = 0xC5
	CmdSetMultipleMode          Opcode = 0xC6
	CmdReadDMA                  Opcode = 0xC8
	CmdReadDMANoRetry           Opcode = 0xC9
	CmdWriteDMA                 Opcode = 0xCA
	CmdWriteDMANoRetry          Opcode = 0xCB
	CmdWriteMultipleFUAExt      Opcode = 0xCE
	CmdStandbyImmediate         Opcode = 0xE0
	CmdIdleImmediate            Opcode = 0xE1
	CmdStandby                  Opcode = 0xE2
	CmdIdle                     Opcode = 0xE3
	CmdCheckPowerMode           Opcode = 0xE5
	CmdSleep                    Opcode = 0xE6
	CmdFlushCache               Opcode = 0xE7
	CmdFlushCacheExt            Opcode = 0xEA
	CmdIdentifyDevice           Opcode = 0xEC
	CmdSetFeatures              Opcode = 0xEF
	CmdReadNativeMaxAddress     Opcode = 0xF8
)

// Commands the package names (so logs read well) but the device answers with
// ABRT.
const (
	CmdDeviceReset           Opcode = 0x08
	CmdReadLogExt            Opcode = 0x2F
	CmdSetMaxAddressExt      Opcode = 0x37
	CmdReadFPDMAQueued       Opcode = 0x60
	CmdWriteFPDMAQueued      Opcode = 0x61
	CmdDownloadMicrocode     Opcode = 0x92
	CmdPacket                Opcode = 0xA0
	CmdIdentifyPacketDevice  Opcode = 0xA1
	CmdSMART                 Opcode = 0xB0
	CmdSecuritySetPassword   Opcode = 0xF1
	CmdSecurityUnlock        Opcode = 0xF2
	CmdSecurityErasePrepare  Opcode = 0xF3
	CmdSecurityEraseUnit     Opcode = 0xF4
	CmdSecurityFreezeLock    Opcode = 0xF5
	CmdSecurityDisablePasswd Opcode = 0xF6
	CmdSetMaxAddress         Opcode = 0xF9
)

// Protocol is how a command moves its data (ACS-3 Annex B).
type Protocol uint8

// Protocols. ProtocolDMA covers both directions; Command.ToDevice tells them
// apart.
const (
	ProtocolNonData Protocol = iota
	ProtocolPIOIn
	ProtocolPIOOut
	ProtocolDMA
)

var protocolNames = [...]string{"non-data", "PIO in", "PIO out", "DMA"}

func (p Protocol) String() string {
	if int(p) < len(protocolNames) {
		return protocolNames[p]
	}
	return "protocol(" + hex8(uint8(p)) + ")"
}

type opFlags uint16

const (
	fKnown     opFlags = 1 << iota // named
	fSupported                     // implemented by Device
	f48                            // 48-bit task file (EXT command)
	fAddr                          // the LBA registers carry an address
	fCount                         // the count register is a sector count: 0 means 256 or 65536
	fWrite                         // data moves host -> device
	fFUA                           // forced unit access
	fMultiple                      // DRQ blocks of the multiple count
)

type opInfo struct {
	name  string
	proto Protocol
	flags opFlags
}

const (
	rw      = fKnown | fSupported | fAddr | fCount
	rw48    = rw | f48
	nondata = fKnown | fSupported
	unsup   = fKnown
)

// ops is indexed by opcode: decoding is a table lookup, no map, no
// allocation.
var ops = [256]opInfo{
	CmdNOP:                      {"NOP", ProtocolNonData, nondata},
	CmdDataSetManagement:        {"DATA SET MANAGEMENT", ProtocolDMA, nondata | f48 | fCount | fWrite},
	CmdRecalibrate:              {"RECALIBRATE", ProtocolNonData, nondata},
	CmdReadSectors:              {"READ SECTORS", ProtocolPIOIn, rw},
	CmdReadSectorsNoRetry:       {"READ SECTORS (no retry)", ProtocolPIOIn, rw},
	CmdReadSectorsExt:           {"READ SECTORS EXT", ProtocolPIOIn, rw48},
	CmdReadDMAExt:               {"READ DMA EXT", ProtocolDMA, rw48},
	CmdReadNativeMaxAddressExt:  {"READ NATIVE MAX ADDRESS EXT", ProtocolNonData, nondata | f48},
	CmdReadMultipleExt:          {"READ MULTIPLE EXT", ProtocolPIOIn, rw48 | fMultiple},
	CmdWriteSectors:             {"WRITE SECTORS", ProtocolPIOOut, rw | fWrite},
	CmdWriteSectorsNoRetry:      {"WRITE SECTORS (no retry)", ProtocolPIOOut, rw | fWrite},
	CmdWriteSectorsExt:          {"WRITE SECTORS EXT", ProtocolPIOOut, rw48 | fWrite},
	CmdWriteDMAExt:              {"WRITE DMA EXT", ProtocolDMA, rw48 | fWrite},
	CmdWriteMultipleExt:         {"WRITE MULTIPLE EXT", ProtocolPIOOut, rw48 | fWrite | fMultiple},
	CmdWriteDMAFUAExt:           {"WRITE DMA FUA EXT", ProtocolDMA, rw48 | fWrite | fFUA},
	CmdReadVerifySectors:        {"READ VERIFY SECTORS", ProtocolNonData, rw},
	CmdReadVerifySectorsNoRetry: {"READ VERIFY SECTORS (no retry)", ProtocolNonData, rw},
	CmdReadVerifySectorsExt:     {"READ VERIFY SECTORS EXT", ProtocolNonData, rw48},
	CmdSeek:                     {"SEEK", ProtocolNonData, nondata | fAddr},
	CmdExecuteDeviceDiagnostic:  {"EXECUTE DEVICE DIAGNOSTIC", ProtocolNonData, nondata},
	CmdInitializeDeviceParams:   {"INITIALIZE DEVICE PARAMETERS", ProtocolNonData, nondata},
	CmdCheckPowerModeAlt:        {"CHECK POWER MODE (98h)", ProtocolNonData, nondata},
	CmdReadMultiple:             {"READ MULTIPLE", ProtocolPIOIn, rw | fMultiple},
	CmdWriteMultiple:            {"WRITE MULTIPLE", ProtocolPIOOut, rw | fWrite | fMultiple},
	CmdSetMultipleMode:          {"SET MULTIPLE MODE", ProtocolNonData, nondata},
	CmdReadDMA:                  {"READ DMA", ProtocolDMA, rw},
	CmdReadDMANoRetry:           {"READ DMA (no retry)", ProtocolDMA, rw},
	CmdWriteDMA:                 {"WRITE DMA", ProtocolDMA, rw | fWrite},
	CmdWriteDMANoRetry:          {"WRITE DMA (no retry)", ProtocolDMA, rw | fWrite},
	CmdWriteMultipleFUAExt:      {"WRITE MULTIPLE FUA EXT", ProtocolPIOOut, rw48 | fWrite | fMultiple | fFUA},
	CmdStandbyImmediate:         {"STANDBY IMMEDIATE", ProtocolNonData, nondata},
	CmdIdleImmediate:            {"IDLE IMMEDIATE", ProtocolNonData, nondata},
	CmdStandby:                  {"STANDBY", ProtocolNonData, nondata},
	CmdIdle:                     {"IDLE", ProtocolNonData, nondata},
	CmdCheckPowerMode:           {"CHECK POWER MODE", ProtocolNonData, nondata},
	CmdSleep:                    {"SLEEP", ProtocolNonData, nondata},
	CmdFlushCache:               {"FLUSH CACHE", ProtocolNonData, nondata},
	CmdFlushCacheExt:            {"FLUSH CACHE EXT", ProtocolNonData, nondata | f48},
	CmdIdentifyDevice:           {"IDENTIFY DEVICE", ProtocolPIOIn, nondata},
	CmdSetFeatures:              {"SET FEATURES", ProtocolNonData, nondata},
	CmdReadNativeMaxAddress:     {"READ NATIVE MAX ADDRESS", ProtocolNonData, nondata},
	CmdDeviceReset:              {"DEVICE RESET", ProtocolNonData, unsup},
	CmdReadLogExt:               {"READ LOG EXT", ProtocolPIOIn, unsup | f48},
	CmdSetMaxAddressExt:         {"SET MAX ADDRESS EXT", ProtocolNonData, unsup | f48},
	CmdReadFPDMAQueued:          {"READ FPDMA QUEUED", ProtocolDMA, unsup | f48},
	CmdWriteFPDMAQueued:         {"WRITE FPDMA QUEUED", ProtocolDMA, unsup | f48 | fWrite},
	CmdDownloadMicrocode:        {"DOWNLOAD MICROCODE", ProtocolPIOOut, unsup | fWrite},
	CmdPacket:                   {"PACKET", ProtocolPIOOut, unsup},
	CmdIdentifyPacketDevice:     {"IDENTIFY PACKET DEVICE", ProtocolPIOIn, unsup},
	CmdSMART:                    {"SMART", ProtocolNonData, nondata}, // READ DATA/THRESHOLDS: PIO in, see Command.Protocol
	CmdSecuritySetPassword:      {"SECURITY SET PASSWORD", ProtocolPIOOut, unsup | fWrite},
	CmdSecurityUnlock:           {"SECURITY UNLOCK", ProtocolPIOOut, unsup | fWrite},
	CmdSecurityErasePrepare:     {"SECURITY ERASE PREPARE", ProtocolNonData, unsup},
	CmdSecurityEraseUnit:        {"SECURITY ERASE UNIT", ProtocolPIOOut, unsup | fWrite},
	CmdSecurityFreezeLock:       {"SECURITY FREEZE LOCK", ProtocolNonData, nondata},
	CmdSecurityDisablePasswd:    {"SECURITY DISABLE PASSWORD", ProtocolPIOOut, unsup | fWrite},
	CmdSetMaxAddress:            {"SET MAX ADDRESS", ProtocolNonData, unsup},
}

// String returns the command's name from ACS-3, for example "READ DMA EXT",
// or "opcode(xxh)" for an opcode the package does not name.
func (op Opcode) String() string {
	if n := ops[op].name; n != "" {
		return n
	}
	return "opcode(" + hex8(uint8(op)) + ")"
}

// Known reports whether the package names op.
func (op Opcode) Known() bool { return ops[op].flags&fKnown != 0 }

// Supported reports whether Device implements op (every other opcode ends
// in DRDY|ERR with ABRT).
func (op Opcode) Supported() bool { return ops[op].flags&fSupported != 0 }

// Protocol returns how op moves data; opcodes the package does not name
// report ProtocolNonData.
func (op Opcode) Protocol() Protocol { return ops[op].proto }

// Ext reports whether op uses the 48-bit task file (its registers are
// written twice, HOB byte first).
func (op Opcode) Ext() bool { return ops[op].flags&f48 != 0 }

// ToDevice reports whether op moves data from the host to the device.
func (op Opcode) ToDevice() bool { return ops[op].flags&fWrite != 0 }

// FUA reports whether op forces its data to stable storage before it
// completes.
func (op Opcode) FUA() bool { return ops[op].flags&fFUA != 0 }

// Multiple reports whether op moves its PIO data in blocks of the multiple
// count set by SET MULTIPLE MODE.
func (op Opcode) Multiple() bool { return ops[op].flags&fMultiple != 0 }

// Addressed reports whether op carries an LBA or CHS address in the task
// file.
func (op Opcode) Addressed() bool { return ops[op].flags&fAddr != 0 }

// Counted reports whether op's sector count register is a count of sectors
// (or, for DATA SET MANAGEMENT, of 512-byte blocks), where 0 means 256 for a
// 28-bit command and 65536 for a 48-bit one.
func (op Opcode) Counted() bool { return ops[op].flags&fCount != 0 }
